"""What one generation did and where its time went."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields


@dataclass
class SourceStats:
    """What one draft source (or chain level's source) did in a request: rounds it proposed in, guesses offered and
    kept, rounds with a rejection, and (at the target level) the tokens its rounds produced; `add` counts a round."""
    rounds: int = 0
    proposed: int = 0
    accepted: int = 0
    rejections: int = 0
    tokens: int = 0

    def add(self, proposed: int, accepted: int, tokens: int = 0) -> None:
        """Count one round: `proposed` guesses, `accepted` of them kept, `tokens` the round produced."""
        self.rounds += 1
        self.proposed += proposed
        self.accepted += accepted
        self.rejections += int(accepted < proposed)
        self.tokens += tokens

    @property
    def alpha(self) -> float:
        """Per-guess acceptance, accepted / (accepted + rejections): the estimate of alpha in (1 - a^(g+1))/(1 - a)."""
        return self.accepted / (self.accepted + self.rejections) if self.accepted + self.rejections else 0.0


def stat(unit: str, doc: str):
    """A Stats field with its declaration."""
    return field(default=0.0 if unit == "s" else 0, metadata={"unit": unit, "doc": doc})


@dataclass
class Stats:
    """What one request did. Each field is declared once (`stat(unit, doc)`); `STATS` lists them with the derived
    figures and the counters by kind, and every renderer (specdec-generate --json, the C struct specdec_stats, serve's
    outputs, the docs' table) is made from it or tested against it (tests/test_surfaces.py)."""
    target_calls: int = stat("count", "target decoder runs (verify passes, or steps at gamma 0)")
    draft_calls: int = stat("count", "draft decoder runs")
    proposed: int = stat("count", "draft tokens offered for verification")
    accepted: int = stat("count", "of those, kept")
    new_tokens: int = stat("count", "tokens generated")
    ort_runs: int = stat("count", "every ONNX Runtime session run: encoders, draft runs, target runs")
    encoder_s: float = stat("s", "encoder runs (once per model and request; a share of a batch's run)")
    draft_s: float = stat("s", "draft runs: decoder step + its sampling head (standardize, draw q and x)")
    target_s: float = stat("s", "target runs: decoder over k+1 tokens + the accept/residual head")
    host_s: float = stat("s", "everything outside ONNX Runtime runs: Python, binding, reading the verdict")
    total_s: float = stat("s", "the whole request")
    sources: dict = field(default_factory=dict)   # name -> SourceStats: "none" for target-only rounds, a source
    #   verified by the target under its name ("draft", "lookup", "lookup,draft", ...), and the lower levels of a
    #   chain under "name>" ("lookup>" for the lookup verified by the draft model in "lookup,draft")

    def source(self, name: str) -> SourceStats:
        """The SourceStats kept under `name` (see `sources`), made empty on first use."""
        if name not in self.sources:
            self.sources[name] = SourceStats()
        return self.sources[name]

    @property
    def acceptance_rate(self) -> float:
        """Guesses kept over guesses proposed, over every source (0.0 when nothing was proposed). Not alpha, the
        per-guess acceptance (SourceStats.alpha): a round stops at its first rejection, so this falls with gamma."""
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def tokens_per_target_call(self) -> float:
        """New tokens per target run: 1.0 without speculation, up to gamma + 1 with every guess kept."""
        return self.new_tokens / self.target_calls if self.target_calls else 0.0

    def by_kind(self) -> dict:
        """The counters by kind of round (STATS' "by kind" group), folded from `sources`: target-only rounds, the
        lookup's rounds (its copies from the datastore included), draft models' rounds (alone or a chain's top
        level), and the guesses chain levels offered the model above them."""
        out = dict.fromkeys(KIND_FIELDS, 0)
        for name, s in self.sources.items():
            if name.endswith(">"):
                out["chain_proposed"] += s.proposed
                out["chain_accepted"] += s.accepted
            elif name == "none":
                out["target_only_rounds"] += s.rounds
            else:
                kind = "lookup" if name in ("lookup", "datastore") else "model"
                out[kind + "_rounds"] += s.rounds
                out[kind + "_proposed"] += s.proposed
                out[kind + "_accepted"] += s.accepted
        return out

    def figures(self) -> dict:
        """Every declared figure by name (STATS' order): ints for counts, floats for seconds and ratios."""
        by_kind = self.by_kind()
        return {f.name: by_kind[f.name] if f.group == "by kind" else getattr(self, f.name) for f in STATS}

    def as_dict(self) -> dict:
        """Every declared figure (STATS) and, under "sources", each source's counters with its alpha: what
        specdec-generate --json prints."""
        return {**self.figures(), "sources": {name: {**asdict(s), "alpha": s.alpha}
                                              for name, s in self.sources.items()}}


@dataclass(frozen=True)
class Figure:
    """One declared figure of a request's Stats."""
    name: str
    unit: str            # "count", "s" (seconds) or "ratio"
    doc: str
    group: str = ""      # "": the request's totals; "by kind": folded from Stats.sources (Stats.by_kind)


_KINDS = (
    ("target_only_rounds", "rounds without guesses: gamma 0, draft none, a lookup that found nothing, or an auto "
                           "choice"),
    ("lookup_rounds", "rounds whose guesses the lookup copied (prompt, output or datastore), verified by the target"),
    ("lookup_proposed", "guesses the lookup offered the target"),
    ("lookup_accepted", "of those, kept"),
    ("model_rounds", "rounds whose guesses came from a draft model (alone, or a chain's top level)"),
    ("model_proposed", "guesses draft models offered the target"),
    ("model_accepted", "of those, kept"),
    ("chain_proposed", "inside chains: guesses a lower level offered the model above it"),
    ("chain_accepted", "of those, kept by that model"),
)
KIND_FIELDS = tuple(name for name, _ in _KINDS)

STATS: tuple[Figure, ...] = (
    *(Figure(f.name, f.metadata["unit"], f.metadata["doc"]) for f in fields(Stats) if "unit" in f.metadata),
    Figure("acceptance_rate", "ratio", "accepted / proposed, the share of guesses kept (0 when nothing was "
                                       "proposed); it falls as gamma grows, unlike alpha, the chance that one guess "
                                       "is kept (specdec-generate --json: sources' alpha)"),
    Figure("tokens_per_target_call", "ratio", "new_tokens / target_calls (0 when there was no target call)"),
    *(Figure(name, "count", doc, "by kind") for name, doc in _KINDS),
)


@dataclass(frozen=True)
class Segment:
    """A stretch of a timed transcript: seconds from the start of the input, and its text."""
    start: float
    end: float | None
    text: str
    token_ids: tuple = ()


@dataclass
class Result:
    """What generate() returns (and generate_batch() returns per request): the text and its token ids, what the
    request did (`stats`), why it stopped, and with beam search the best sequences and their scores."""
    text: str
    token_ids: list = field(default_factory=list)   # generated ids, without the decoder start token
    stats: Stats = field(default_factory=Stats)
    stop_reason: str = ""                            # eos, max_new_tokens, max_length, cancelled or "error: ..."
    sequences: list = field(default_factory=list)    # beam search: the num_return_sequences best, best first
    #                                                  (token_ids and text are the first); [token_ids] otherwise
    scores: list = field(default_factory=list)       # beam search: their scores (sum log p / length ** penalty)
    error: str = ""                                  # generate_batch: this request's one-line error (then no text)
    segments: list = field(default_factory=list)     # timestamps=True: Segment(start, end, text, ...)


@dataclass
class Piece:
    """What stream() yields as soon as tokens are accepted."""
    token_ids: list
    text: str
    stats: Stats | None = None      # the request's statistics so far
    stop_reason: str = ""           # on the last piece: eos, max_new_tokens, max_length, cancelled or "error: ..."
    segments: list = field(default_factory=list)    # timestamps=True: the last piece's (several windows: each window's)


class Pieces:
    """One request's pieces as its tokens arrive: each piece's text is what it adds to the whole output's text
    (`decode` of all the tokens so far; the whole text again when a token changed how earlier ones decode)."""

    def __init__(self, decode):
        self.decode, self.tokens, self.shown = decode, [], ""

    def add(self, new: list, stats: Stats | None, stop_reason: str) -> Piece:
        self.tokens += new
        text = self.decode(self.tokens)
        piece = Piece(new, text[len(self.shown):] if text.startswith(self.shown) else text, stats, stop_reason)
        self.shown = text
        return piece
