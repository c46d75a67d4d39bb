"""A speech request's decoder prompt and its transcript's times and windows."""
