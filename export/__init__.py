"""specdec.export"""
