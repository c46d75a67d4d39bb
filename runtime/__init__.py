"""specdec.runtime: exact speculative decoding on ONNX Runtime (needs only onnxruntime, numpy, tokenizers)."""

from .decoder import Piece, SpeculativeDecoder
from .draft import DraftSource, ModelDraft
from .errors import SpecdecError
from .lookup import LookupDraft
from .model import CachedSeq2Seq
from .params import Params
from .round import Proposal, Verdict
from .stats import Result, Stats

__all__ = ["SpeculativeDecoder", "SpecdecError", "Params", "Result", "Stats", "Piece", "DraftSource", "ModelDraft", "LookupDraft",
           "CachedSeq2Seq", "Proposal", "Verdict"]
