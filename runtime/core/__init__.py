"""Declarations every layer shares: the one error type, a request's parameters, the stats schema."""
