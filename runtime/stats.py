"""What one generation did and where its time went."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class Stats:
    target_calls: int = 0          # target decoder runs (verify passes, or steps at gamma = 0)
    draft_calls: int = 0           # draft decoder runs
    proposed: int = 0              # draft tokens offered for verification
    accepted: int = 0              # of those, kept
    new_tokens: int = 0
    ort_runs: int = 0              # every ONNX Runtime session run: encoders, draft steps, target runs
    encoder_s: float = 0.0         # encoder runs (once per model and request)
    draft_s: float = 0.0           # draft runs: decoder step + its sampling head (standardize, draw q and x)
    target_s: float = 0.0          # target runs: decoder over k+1 tokens + the accept/residual head
    host_s: float = 0.0            # everything outside ORT runs: Python, binding, reading the verdict
    total_s: float = 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def tokens_per_target_call(self) -> float:
        return self.new_tokens / self.target_calls if self.target_calls else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "acceptance_rate": self.acceptance_rate,
                "tokens_per_target_call": self.tokens_per_target_call}


@dataclass
class Result:
    text: str
    token_ids: list = field(default_factory=list)   # generated ids, without the decoder start token
    stats: Stats = field(default_factory=Stats)
    stop_reason: str = ""                            # "eos", "max_new_tokens" or "max_length"
