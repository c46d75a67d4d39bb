"""Requests between the façade and the decoding: opening an export, admission, the scheduler and the batcher."""
