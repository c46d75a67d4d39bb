"""specdec.runtime: exact speculative decoding on ONNX Runtime (needs only onnxruntime, numpy, tokenizers)."""

from .core.errors import RunFailed, SpecdecError, SpecdecWarning
from .core.options import LoadOptions
from .core.params import Params
from .core.stats import Piece, Result, Segment, Stats
from .decoder import SpeculativeDecoder
from .decoding.sources.model_draft import DraftSource, ModelDraft
from .decoding.sources.lookup import LookupDraft
from .decoding.sources.contract import Proposal, Verdict
from .engine.device import PROVIDER_CHOICES, PROVIDER_HELP  # noqa: F401
from .engine.model import CachedSeq2Seq
from .families import family_inputs  # noqa: F401
from .loading.manifest import load_manifest

__all__ = ["SpeculativeDecoder", "SpecdecError", "SpecdecWarning", "RunFailed", "Params", "LoadOptions", "Result",
           "Stats", "Piece", "DraftSource", "ModelDraft", "LookupDraft", "CachedSeq2Seq", "Proposal", "Verdict",
           "load_manifest", "Segment"]
# not in __all__: what every command line's --provider takes and says of it (for the package's own command lines)
