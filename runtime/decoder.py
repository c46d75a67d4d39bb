"""SpeculativeDecoder: load an export directory once, then generate or stream with exact speculative decoding.

The façade: it opens the export (scheduling/opening.py), admits each request once (scheduling/admission.py: checked
and planned, its input through the export's model family, families/) and hands it to the scheduler
(scheduling/scheduler.py), which runs it alone, in a batch or through the batcher. Nothing below calls back up."""

from __future__ import annotations

from pathlib import Path

from .core.options import LoadOptions
from .core.params import Params
from .core.stats import Result
from .decoding.learned import Learned
from .decoding.sources.model_draft import ModelDraft
from .engine.capture import CapturedSeq2Seq
from .engine.device import device_of, release_freed_memory
from .engine.model import CachedSeq2Seq
from .engine.workspace import Workspace
from .families import family_of
from .scheduling.admission import Admission
from .scheduling.opening import open_export
from .scheduling.scheduler import Scheduler

class SpeculativeDecoder:
    """A target model and its draft models over one workspace of device buffers; sessions, KV caches and buffers
    are created once and reused by every request. A request's `draft` parameter picks the source.

    Public attributes: `target` (CachedSeq2Seq), `models` (name -> CachedSeq2Seq, the draft models), `draft` (the
    default model draft, a ModelDraft), `learned` (what the decoder learns across requests, in one object with
    `reset()`: the draft sources made for requests, what draft="auto" / gamma="auto" learned (`estimates`, and
    `beam_estimates` for beam search), the batches' switches; `learning()` makes another over the same models, and
    `generate(..., learned=...)` / `stream(..., learned=...)` use it instead, as specdec-bench does to run
    configurations with and without the datastore on one workspace), `estimates` / `beam_estimates` (those of
    `learned`), `workspace` (the device buffers every request reuses), `tokenizer`, `manifest`, `provider`,
    `gamma_max`, `max_length`, `vocab_size` (the model's rows: ids 0 .. vocab_size - 1 may go in and come out),
    `vocabulary` (those rows and the ids the tokenizer makes: a real T5 has 32,128 rows for 32,100 ids), `eos_id`,
    `start_id` (the decoder start token), `datastore` (what the lookup searches besides the output and the source;
    None without one), `family` (the export's model family: its input keywords and checks, runtime/families/),
    `scheduler` (what runs admitted requests, scheduling/scheduler.py: `scheduler.source(params)` is the draft source a
    request's (draft, gamma) asks for, `scheduler.beam_model(name)` a model's batched beam session, as specdec-bench
    uses them).

    Threads: one request at a time (runtime/engine/gate.py). generate(), beam search and reset_estimates() wait for the
    request before them; a stream holds the decoder from its first piece to its end, and loses it (its next piece
    raises SpecdecError) when it is left unadvanced for `stream_idle_s` seconds while another request waits, or when
    its own thread starts another request."""

    def __init__(self, manifest, provider: str, target: CachedSeq2Seq, models: dict, stream_idle_s: float = 30.0):
        self.manifest, self.provider = manifest, provider
        self.device = device_of(provider)
        self.gamma_max, self.max_length = manifest.gamma_max, manifest.max_length
        self.vocab_size = manifest.vocab_size
        ids = manifest.special_ids
        self.eos_id, self.start_id = int(ids["eos_token_id"]), int(ids["decoder_start_token_id"])
        self.tokenizer = manifest.tokenizer()     # checked: confined, size-limited, ids inside the vocabulary
        self.vocabulary = manifest.vocabulary     # the model's rows and the ids its tokenizer makes
        self.target, self.models = target, dict(models)
        self.draft = ModelDraft(self.models["draft"]) if "draft" in self.models else None
        self.learned = Learned(self.models, None, self.vocabulary.tokenizer_size)
        self.workspace = Workspace(self.gamma_max, self.vocab_size, self.device, self.max_length)
        self.workspace.trees = target.trees
        self.family = family_of(manifest, self.tokenizer, self.start_id, self.eos_id)
        admission = Admission(self.family, self.models, self.gamma_max, isinstance(target, CapturedSeq2Seq))
        self.scheduler = Scheduler(admission, target, self.models, self.workspace, self.learned, self.eos_id,
                                   self.start_id, self.max_length, self.tokenizer, stream_idle_s)

    @classmethod
    def load(cls, export_dir: str | Path, options: LoadOptions | None = None, **keywords) -> "SpeculativeDecoder":
        """Open an export directory (checksums verified) with every draft model it holds, with `options` (a
        LoadOptions) and/or its fields as keywords: provider, threads, draft, stream_idle_s, datastore,
        provider_options, graph_capture (each declared once in specdec.runtime.core.options, with its default and
        the values it takes; the table in docs/guides/runtime.md, "Loading", says what each does). An unknown
        keyword or a value not accepted is a one-line SpecdecError."""
        options = LoadOptions.of(options, **keywords).checked()
        manifest, provider, target, models, store = open_export(export_dir, options)
        decoder = cls(manifest, provider, target, models, options.stream_idle_s)     # checks the tokenizer first
        if store is not None:
            decoder.datastore = store
        release_freed_memory()          # what reading the graphs left in the heap
        return decoder

    @property
    def stream_idle_s(self) -> float:
        """How long an unadvanced stream keeps the decoder while another request waits for it (seconds)."""
        return self.scheduler.gate.idle_s

    @stream_idle_s.setter
    def stream_idle_s(self, seconds: float) -> None:
        self.scheduler.gate.idle_s = float(seconds)

    @property
    def captured(self) -> bool:
        """Loaded with graph_capture=True: its models run the export's capturable graphs (no batches, no beams)."""
        return self.scheduler.admission.captured

    @property
    def estimates(self):
        """What the default request (draft="auto", gamma="auto") learned."""
        return self.learned.estimates

    @property
    def beam_estimates(self):
        """What gamma="auto" learned for beam search."""
        return self.learned.beam_estimates

    @property
    def datastore(self):
        """What the lookup searches besides the output and the source, or None."""
        return self.learned.datastore

    @datastore.setter
    def datastore(self, store) -> None:
        self.learned.datastore = store
        self.learned.reset()

    def reset_estimates(self) -> None:
        """Forget what the decoder learned (acceptance rates and costs) from earlier requests."""
        with self.scheduler.gate.held():
            self.learned.reset()

    def learning(self, datastore: bool = True) -> Learned:
        """A new object to learn in (see `learned`), over this decoder's models; without the datastore when
        `datastore` is False. Pass it as generate(..., learned=...) or stream(..., learned=...)."""
        return Learned(self.models, self.datastore if datastore else None, self.vocabulary.tokenizer_size)

    # -- requests -------------------------------------------------------------------------------------------
    def generate(self, prompt: str | None = None, *, input_ids=None, params: Params | None = None,
                 learned: Learned | None = None, **overrides) -> Result:
        """Generate from a prompt (text) or input_ids. draft="none" or gamma=0 is target-only decoding on the same
        sessions; the default (draft="auto", gamma="auto") picks source and gamma each round. Parameters as for
        stream(), and for beam search num_beams, length_penalty, early_stopping, num_return_sequences.

        An export of another model family takes that family's input keywords instead of a prompt (families/; each
        family's guide says what they are); input longer than the encoder's window
        is decoded window by window, each window's decoding exact; max_new_tokens counts per window."""
        admitted = self.scheduler.admission.admit(prompt, input_ids, params, overrides)
        return self.scheduler.generate(admitted, learned)

    def stream(self, prompt: str | None = None, *, input_ids=None, params: Params | None = None,
               learned: Learned | None = None, **overrides):
        """Yield Piece(token_ids, text, stats, stop_reason) as soon as each iteration's tokens are accepted; `text`
        is the new text, `stats` the request's statistics so far, `stop_reason` set on the last piece.
        Parameters: a Params object and/or its fields as keywords (Params: max_new_tokens, gamma, draft,
        temperature, top_k, top_p, lenience, seed, min_new_tokens, no_repeat_ngram_size), and a model family's
        input keywords (see generate): with timestamps=True the last Piece's `segments` are the transcript's, and
        input longer than the window streams a Piece per window, its `segments` the window's. `learned`: learn in
        that object (`learning()`) instead of `self.learned`."""
        admitted = self.scheduler.admission.admit(prompt, input_ids, params, overrides)
        yield from self.scheduler.stream(admitted, learned)

    def generate_batch(self, prompts=None, *, input_ids=None, params=None, max_batch: int = 16,
                       **overrides) -> list:
        """Generate many requests together: up to `max_batch` at a time share every target run (runtime/decoding/
        batch.py), the others wait and take the place of requests that finish. `prompts`: a list of texts, or
        `input_ids`: a list of id sequences. `params`: one Params for all, or a list with one per request;
        keywords override fields of every request. Returns one Result per request, in order; a request with bad
        input gets a Result whose `error` is its one-line message, and the others are generated."""
        return self.scheduler.results(self.scheduler.batch(prompts, input_ids, params, max_batch, overrides))

    def stream_batch(self, prompts=None, *, input_ids=None, params=None, max_batch: int = 16, **overrides):
        """As generate_batch, but yield (index, Piece) as each request's tokens are accepted; a request with bad
        input yields one Piece with no tokens and its error in `stop_reason` ("error: ...")."""
        yield from self.scheduler.pieces(self.scheduler.batch(prompts, input_ids, params, max_batch, overrides))

    def submit(self, prompt: str | None = None, *, input_ids=None, params: Params | None = None, **overrides):
        """Hand one request over from any thread and get its Ticket at once: iterate it for its Pieces, or call
        `result()` for its Result; `cancel()` stops it. The request is checked here (a bad one raises its one-line
        SpecdecError and nothing is queued). One that a batch can run joins the rows of this decoder's batcher
        (continuous batching, made on the first submit: at most 16 rows, 64 waiting; `batcher()` makes one of other
        sizes); any other (beam search, a draft model, logits processors, lenience < 1, a model family that does not
        batch) runs alone on the decoder when its ticket is first read, in the thread that reads it. Parameters as for
        generate(). The batcher's thread waits idle between requests and keeps the decoder alive until the process
        ends; a decoder meant to be dropped should take requests through a `batcher()` it closes."""
        return self.scheduler.submit(prompt, input_ids=input_ids, params=params, **overrides)

    def batcher(self, max_batch: int = 16, max_queue: int = 64):
        """A Batcher: requests submitted from any thread (`submit()`, which returns a Ticket) are decoded together,
        joining the running batch between rounds; at most `max_batch` rows, at most `max_queue` requests waiting."""
        return self.scheduler.batcher(max_batch, max_queue)

    def decode(self, token_ids) -> str:
        """Token ids to text through the export's tokenizer, special tokens dropped (what `Result.text` holds)."""
        return self.scheduler.text(token_ids)
