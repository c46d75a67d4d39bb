"""specdec.bindings"""
