"""specdec.runtime: exact speculative decoding on ONNX Runtime (needs only onnxruntime, numpy, tokenizers)."""

from .decoder import Piece, SpeculativeDecoder
from .errors import SpecdecError
from .stats import Result, Stats

__all__ = ["SpeculativeDecoder", "SpecdecError", "Result", "Stats", "Piece"]
