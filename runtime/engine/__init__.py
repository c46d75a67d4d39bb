"""Devices, sessions and buffers: one exported model's runs over its in-place KV cache, the round's workspace, the beam cache, and the gate that keeps one request on a decoder at a time."""
