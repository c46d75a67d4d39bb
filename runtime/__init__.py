"""specdec.runtime"""
