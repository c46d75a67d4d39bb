"""Decoding: one round of Algorithm 1 (propose, verify), the draft sources and auto, beam search."""
