"""specdec: exact speculative decoding for T5 at the edge (ONNX Runtime, Python, C and C++)."""

__version__ = "0.1.0"
