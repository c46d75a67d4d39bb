"""What one generation did and where its time went."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class SourceStats:
    """What one draft source (or chain level's source) did in a request: rounds it proposed in, guesses offered and
    kept, rounds with a rejection, and (at the target level) the tokens its rounds produced."""
    rounds: int = 0
    proposed: int = 0
    accepted: int = 0
    rejections: int = 0
    tokens: int = 0

    def add(self, proposed: int, accepted: int, tokens: int = 0) -> None:
        self.rounds += 1
        self.proposed += proposed
        self.accepted += accepted
        self.rejections += int(accepted < proposed)
        self.tokens += tokens

    @property
    def alpha(self) -> float:
        """Per-guess acceptance, accepted / (accepted + rejections): the estimate of alpha in (1 - a^(g+1))/(1 - a)."""
        return self.accepted / (self.accepted + self.rejections) if self.accepted + self.rejections else 0.0


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
    sources: dict = field(default_factory=dict)   # name -> SourceStats: "none" for target-only rounds, a source
    #   verified by the target under its name ("draft", "lookup", "lookup,draft", ...), and the lower levels of a
    #   chain under "name>" ("lookup>" for the lookup verified by the draft model in "lookup,draft")

    def source(self, name: str) -> SourceStats:
        if name not in self.sources:
            self.sources[name] = SourceStats()
        return self.sources[name]

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def tokens_per_target_call(self) -> float:
        return self.new_tokens / self.target_calls if self.target_calls else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "sources": {name: {**asdict(s), "alpha": s.alpha} for name, s in self.sources.items()},
                "acceptance_rate": self.acceptance_rate,
                "tokens_per_target_call": self.tokens_per_target_call}


@dataclass
class Result:
    text: str
    token_ids: list = field(default_factory=list)   # generated ids, without the decoder start token
    stats: Stats = field(default_factory=Stats)
    stop_reason: str = ""                            # "eos", "max_new_tokens" or "max_length"
    sequences: list = field(default_factory=list)    # beam search: the num_return_sequences best, best first
    #                                                  (token_ids and text are the first); [token_ids] otherwise
    scores: list = field(default_factory=list)       # beam search: their scores (sum log p / length ** penalty)
