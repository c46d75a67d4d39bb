"""specdec.models"""
