"""SpeculativeDecoder: load an export directory once, then generate or stream with exact speculative decoding."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import numpy as np

from .core.errors import SpecdecError
from .core.params import Params, checked_max_batch
from .core.stats import Piece, Pieces, Result, Stats
from .decoding.strategies.batch import Batching, Waiting
from .decoding.sources.model_draft import DraftSource, ModelDraft
from .decoding.request import Request
from .decoding.strategies.beam_search import BeamSearching
from .decoding.strategies.sampling import Sampling
from .decoding.speech.prompt import checked_audio, make_prompt, time_step
from .decoding.speech.transcript import merged, segments, windows
from .loading.audio import check_audio
from .decoding.plan import Plan, plan
from .decoding.learned import Learned
from .engine.batch_model import BatchModel
from .engine.beam_model import BeamModel
from .engine.device import device_of, release_freed_memory
from .engine.gate import Gate
from .engine.capture import NO_EAGER, NO_EAGER_FIX, CapturedSeq2Seq
from .engine.model import CachedSeq2Seq
from .engine.workspace import Workspace
from .scheduling.opening import open_export

# what every command line's --graph-capture says of load(graph_capture=True) (docs/guides/runtime.md says the rest)
GRAPH_CAPTURE_HELP = ("run the export's capturable graphs (an export made with specdec-export --graph-capture): with "
                      "--provider cuda each width's step is captured as a CUDA graph, on cpu the same graphs run "
                      "uncaptured; beam search and batches then refuse (they need the eager graphs)")


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
    None without one).

    Threads: one request at a time (runtime/engine/gate.py). generate(), beam search and reset_estimates() wait for the
    request before them; a stream holds the decoder from its first piece to its end, and loses it (its next piece
    raises SpecdecError) when it is left unadvanced for `stream_idle_s` seconds while another request waits, or when
    its own thread starts another request."""

    def __init__(self, manifest, provider: str, target: CachedSeq2Seq, models: dict, stream_idle_s: float = 30.0,
                 datastore=None):
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
        self.learned = Learned(self.models, datastore, self.vocabulary.tokenizer_size)
        self._beam_models = {}          # name -> BeamModel, opened on the first beam search request
        self._batch_model = None        # the BatchModel every batch runs on, grown for the most rows asked
        self.workspace = Workspace(self.gamma_max, self.vocab_size, self.device, self.max_length)
        self.workspace.trees = target.trees
        self._gate = Gate(stream_idle_s)
        self._batcher = None            # the Batcher submit() hands requests to, made on its first call
        self._batcher_lock = threading.Lock()

    @property
    def stream_idle_s(self) -> float:
        """How long an unadvanced stream keeps the decoder while another request waits for it (seconds)."""
        return self._gate.idle_s

    @stream_idle_s.setter
    def stream_idle_s(self, seconds: float) -> None:
        self._gate.idle_s = float(seconds)

    def reset_estimates(self) -> None:
        """Forget what the decoder learned (acceptance rates and costs) from earlier requests."""
        with self._gate.held():
            self.learned.reset()

    def learning(self, datastore: bool = True) -> Learned:
        """A new object to learn in (see `learned`), over this decoder's models; without the datastore when
        `datastore` is False. Pass it as generate(..., learned=...) or stream(..., learned=...)."""
        return Learned(self.models, self.datastore if datastore else None, self.vocabulary.tokenizer_size)

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

    def source(self, params: Params, learned: Learned | None = None) -> DraftSource | None:
        """The draft source a request's (draft, gamma) asks for; None for target-only decoding. A bad name is a
        one-line SpecdecError naming the choices."""
        return self._learned(learned).for_sampling(self._plan(params))

    def _plan(self, params: Params, batch: bool = False) -> Plan:
        """What a checked request runs (decoding/plan.py): where, with which source, at which gamma. `batch`: as a
        row of a batch, which a decoder loaded with graph_capture never runs (batches run the eager graphs)."""
        if batch and self.captured:
            raise SpecdecError(NO_EAGER, NO_EAGER_FIX)
        return plan(params, self.models, self.gamma_max, batch)

    @classmethod
    def load(cls, export_dir: str | Path, options: LoadOptions | None = None, **keywords) -> "SpeculativeDecoder":
        """Open an export directory (checksums verified) with every draft model it holds, with `options` (a
        LoadOptions) and/or its fields as keywords: provider, threads, draft, stream_idle_s, datastore,
        provider_options, graph_capture (each declared once in specdec.runtime.core.options, with its default and
        the values it takes; the table in docs/guides/runtime.md, "Loading", says what each does). An unknown
        keyword or a value not accepted is a one-line SpecdecError."""
        from .core.options import LoadOptions

        options = LoadOptions.of(options, **keywords).checked()
        manifest, provider, target, models, store = open_export(export_dir, options)
        decoder = cls(manifest, provider, target, models, options.stream_idle_s)     # checks the tokenizer first
        if store is not None:
            decoder.datastore = store
        release_freed_memory()          # what reading the graphs left in the heap
        return decoder

    def _learned(self, learned) -> Learned:
        if learned is None:
            return self.learned
        if not isinstance(learned, Learned) or learned.models is not self.models:
            raise SpecdecError("learned= must come from this decoder's learning()",
                               "make one with decoder.learning(), or leave learned out")
        return learned

    # -- requests -------------------------------------------------------------------------------------------
    def _source(self, prompt, input_ids) -> np.ndarray:
        if (prompt is None) == (input_ids is None):
            raise SpecdecError("pass exactly one of a prompt text or input_ids")
        if input_ids is None:
            if not isinstance(prompt, str) or not prompt.strip():
                raise SpecdecError("the prompt is empty", "pass some text to generate from")
            ids = np.asarray(self.tokenizer.encode(prompt).ids, dtype=np.int64)
        else:
            try:
                ids = np.asarray(list(input_ids), dtype=np.int64).reshape(-1)
            except (TypeError, ValueError, OverflowError):
                raise SpecdecError("input_ids must be a sequence of integers") from None
            if ids.size == 0:
                raise SpecdecError("input_ids is empty", "pass at least one token id")
            bad = ids[(ids < 0) | (ids >= self.vocab_size)]
            if bad.size:
                raise SpecdecError(f"input_ids contains {int(bad[0])}, outside the vocabulary 0..{self.vocab_size - 1}")
        if ids.size > self.max_length:
            raise SpecdecError(f"the prompt is {ids.size} tokens, longer than max_length {self.max_length}",
                               "shorten it, or re-export with a larger --max-length")
        return ids

    def _strategy(self, planned: Plan, learned: Learned):
        """How a planned request is decoded: beam search, or speculative sampling with the source it asks for."""
        if planned.where == "beams":
            draft = planned.source
            return BeamSearching(self.beam_model("target"), self.beam_model(draft) if draft else None,
                                 learned.beam_estimates, self.eos_id, self.start_id, self.max_length)
        return Sampling(self.workspace, self.target, learned.for_sampling(planned), self.eos_id, self.start_id,
                        self.max_length)

    def _speech(self, audio, language, task, timestamps=False) -> tuple:
        """A Whisper request's checked PCM and its SpeechPrompt (decoding/speech/prompt.py); for a T5 export, a one-line
        error unless neither audio, language, task nor timestamps is given."""
        speech = self.manifest.speech
        if speech is None:
            if audio is not None or language is not None or task is not None or timestamps is not False:
                raise SpecdecError("audio, language, task and timestamps are for Whisper exports; this export is a "
                                   "text model", "pass a prompt text or input_ids")
            return None, None
        return checked_audio(audio, speech), make_prompt(speech, self.start_id, language, task, timestamps)

    def _input(self, prompt, input_ids, audio, language, task, timestamps=False) -> tuple:
        """A request's checked input: (token ids, None) for a text export, (PCM samples, its SpeechPrompt) for a
        Whisper export."""
        pcm, speech = self._speech(audio, language, task, timestamps)
        if speech is None:
            return self._source(prompt, input_ids), None
        if prompt is not None or input_ids is not None:
            raise SpecdecError("this is a Whisper export: it transcribes audio, not a prompt text or input_ids",
                               "pass audio= (a float32 16 kHz array or a WAV file's path)")
        return pcm, speech

    def _serve(self, prompt, input_ids, params: Params, audio=None, language=None, task=None,
               planned: Plan | None = None, learned: Learned | None = None, timestamps=False):
        """The one request path: check the prompt, decode it with its strategy, time every iteration. Yields
        (request, new tokens) per iteration; the request's stop_reason is set on the last."""
        source, speech = self._input(prompt, input_ids, audio, language, task, timestamps)
        planned = planned or self._plan(params)
        strategy = self._strategy(planned, self._learned(learned))
        request = Request(source, params, planned, speech=speech)
        for new in strategy.run(request):
            request.tick()
            yield request, new

    def stream(self, prompt: str | None = None, *, input_ids=None, params: Params | None = None, audio=None,
               language: str | None = None, task: str | None = None, timestamps: bool = False,
               learned: Learned | None = None, **overrides):
        """Yield Piece(token_ids, text, stats, stop_reason) as soon as each iteration's tokens are accepted; `text`
        is the new text, `stats` the request's statistics so far, `stop_reason` set on the last piece.
        Parameters: a Params object and/or its fields as keywords (Params: max_new_tokens, gamma, draft,
        temperature, top_k, top_p, lenience, seed, min_new_tokens, no_repeat_ngram_size). A Whisper export takes
        `audio` instead of a prompt (see generate); with timestamps=True the last Piece's `segments` are the
        transcript's, and audio longer than the window streams a Piece per window, its `segments` the window's. `learned`: learn in that object (`learning()`) instead of `self.learned`."""
        pieces = Pieces(self.decode)
        params = Params.of(params, **overrides).checked(self.gamma_max)
        planned = self._plan(params)
        if planned.where == "beams":
            raise SpecdecError("beam search cannot stream: every beam may still lose until the search ends",
                               "use generate() with num_beams > 1, or stream with num_beams=1")
        audio = self._samples(audio)
        if self._long(audio):
            yield from self._stream_long(audio, params, language, task, timestamps, learned)
            return
        hold = self._gate.acquire()
        try:
            for request, new in self._serve(prompt, input_ids, params, audio, language, task, planned,
                                              learned, timestamps):
                piece = pieces.add(new, request.stats, request.stop_reason)
                if timestamps and request.stop_reason:      # the last piece: the whole transcript's segments
                    piece.segments = self._segments(pieces.tokens)
                self._gate.pause(hold)      # the consumer has the piece; the decoder stays this stream's
                yield piece
                self._gate.resume(hold)     # raises if the stream lost the decoder meanwhile
        finally:
            self._gate.release(hold)

    def generate(self, prompt: str | None = None, *, input_ids=None, params: Params | None = None, audio=None,
                 language: str | None = None, task: str | None = None, timestamps: bool = False,
                 learned: Learned | None = None, **overrides) -> Result:
        """Generate from a prompt (text) or input_ids. draft="none" or gamma=0 is target-only decoding on the same
        sessions; the default (draft="auto", gamma="auto") picks source and gamma each round. Parameters as for
        stream(), and for beam search num_beams, length_penalty, early_stopping, num_return_sequences.

        A Whisper export transcribes `audio` (a float32 array of 16 kHz mono samples, or a WAV file's path)
        instead: `language` as a code ("en", or its token "<|en|>"; None: detected by the target), `task`
        "transcribe" (the default) or "translate"; its suppressed tokens apply to p and q alike. `timestamps`
        True (a model with timestamp tokens): the Result's `segments` hold each segment's start, end and text.
        Audio longer than the encoder's window is transcribed window by window (decoding/speech/transcript.py; at most
        4 h), each window's decoding exact; max_new_tokens counts per window."""
        params = Params.of(params, **overrides).checked(self.gamma_max)
        audio = self._samples(audio)
        if self._long(audio):
            return self._transcribe(audio, params, language, task, timestamps, learned)
        with self._gate.held():
            return self._generate(prompt, input_ids, params, audio, language, task, timestamps, learned)

    def _generate(self, prompt, input_ids, params, audio, language, task, timestamps, learned) -> Result:
        out, request = [], None
        for request, new in self._serve(prompt, input_ids, params, audio, language, task, learned=learned,
                                        timestamps=timestamps):
            out.extend(new)
        return Result(self.decode(out), out, request.stats, request.stop_reason, request.sequences or [out],
                      request.scores, segments=self._segments(out) if timestamps else [])

    def _segments(self, tokens) -> list:
        stamps = self.manifest.speech["timestamps"]
        return segments(tokens, stamps["begin"], stamps["count"], time_step(self.manifest.speech), self.eos_id,
                        self.decode)

    # -- audio longer than the window ---------------------------------------------------------------------------
    def _samples(self, audio):
        """A Whisper export's audio read and checked once (a WAV file's path becomes its samples); anything else as
        given (the request's own checks refuse it)."""
        return check_audio(audio) if self.manifest.speech is not None and audio is not None else audio

    def _long(self, audio) -> bool:
        return audio is not None and self.manifest.speech is not None and \
            audio.size > int(self.manifest.speech["n_samples"])

    def _windows(self, pcm, params, language, task, timestamps, learned):
        """(Result of a window, its Segments) for each window of long audio, each decoded holding the decoder."""
        make_prompt(self.manifest.speech, self.start_id, language, task, timestamps)    # one-line errors first

        def decode(window, stamps, seed):
            with self._gate.held():
                return self._generate(None, None, replace(params, seed=seed % (1 << 64)), window, language, task,
                                      stamps, learned)

        for _, result, found in windows(pcm, self.manifest.speech, decode, params.seed, self.eos_id, self.decode):
            yield result, found

    def _transcribe(self, pcm, params, language, task, timestamps, learned) -> Result:
        results, found = [], []
        for result, window_segments in self._windows(pcm, params, language, task, timestamps, learned):
            results.append(result)
            found += window_segments
        ids = [t for s in found for t in s.token_ids]
        return Result(" ".join(s.text for s in found if s.text), ids, merged([r.stats for r in results]),
                      results[-1].stop_reason, [ids], [], segments=found if timestamps else [])

    def _stream_long(self, pcm, params, language, task, timestamps, learned):
        results, first = [], True
        for result, found in self._windows(pcm, params, language, task, timestamps, learned):
            results.append(result)
            text = " ".join(s.text for s in found if s.text)
            yield Piece([t for s in found for t in s.token_ids], text if first or not text else " " + text,
                        merged([r.stats for r in results]), "", segments=found if timestamps else [])
            first = first and not text
        yield Piece([], "", merged([r.stats for r in results]), results[-1].stop_reason)

    # -- batches ----------------------------------------------------------------------------------------------
    def generate_batch(self, prompts=None, *, input_ids=None, params=None, max_batch: int = 16,
                       **overrides) -> list:
        """Generate many requests together: up to `max_batch` at a time share every target run (runtime/decoding/
        batch.py), the others wait and take the place of requests that finish. `prompts`: a list of texts, or
        `input_ids`: a list of id sequences. `params`: one Params for all, or a list with one per request;
        keywords override fields of every request. Returns one Result per request, in order; a request with bad
        input gets a Result whose `error` is its one-line message, and the others are generated."""
        return self._collect(self._batch(prompts, input_ids, params, max_batch, overrides))

    def stream_batch(self, prompts=None, *, input_ids=None, params=None, max_batch: int = 16, **overrides):
        """As generate_batch, but yield (index, Piece) as each request's tokens are accepted; a request with bad
        input yields one Piece with no tokens and its error in `stop_reason` ("error: ...")."""
        pieces: dict = {}           # index -> Pieces
        for index, request, new in self._batch(prompts, input_ids, params, max_batch, overrides):
            if isinstance(request, SpecdecError):
                yield index, Piece([], "", None, f"error: {request}")
                continue
            yield index, pieces.setdefault(index, Pieces(self.decode)).add(new, request.stats, request.stop_reason)

    def _collect(self, events) -> list:
        outs: dict = {}
        results: dict = {}
        for index, request, new in events:
            if isinstance(request, SpecdecError):
                results[index] = Result("", [], Stats(), "", [], [], str(request))
                continue
            outs.setdefault(index, []).extend(new)
            if request.stop_reason:
                out = outs[index]
                results[index] = Result(self.decode(out), out, request.stats, request.stop_reason, [out], [])
        return [results[i] for i in range(len(results))]

    def _batch(self, prompts, input_ids, params, max_batch: int, overrides):
        """Check every request (a bad one becomes its error), then decode the good ones in batches. Yields
        (index, Request or SpecdecError, new tokens)."""
        if (prompts is None) == (input_ids is None):
            raise SpecdecError("pass exactly one of prompts (a list of texts) or input_ids (a list of id lists)")
        items = prompts if prompts is not None else input_ids
        if isinstance(items, (str, bytes)) or not hasattr(items, "__len__"):
            raise SpecdecError("generate_batch takes a list of prompts", "pass [text, ...], or use generate() "
                               "for one")
        if len(items) == 0:
            raise SpecdecError("the batch is empty", "pass at least one prompt")
        checked_max_batch(max_batch)
        if isinstance(params, (list, tuple)) and len(params) != len(items):
            raise SpecdecError(f"params has {len(params)} entries for {len(items)} prompts",
                               "pass one Params for all, or one per prompt")
        queue, failed = [], []
        for i, item in enumerate(items):
            try:
                p = params[i] if isinstance(params, (list, tuple)) else params
                request = self._batch_request(item, None, p, overrides) if prompts is not None else \
                    self._batch_request(None, item, p, overrides)
                queue.append((i, request))
            except SpecdecError as err:
                failed.append((i, err))
        for i, err in failed:
            yield i, err, []
        if not queue:
            return
        greedy = all(r.params.temperature <= 0 for _, r in queue)
        # gamma="auto": lookup rounds only where they are measured to pay (a fixed gamma: every round)
        auto = any(r.plan.adaptive and r.plan.source == "lookup" for _, r in queue)
        most = min(len(queue), max_batch)
        for index, request, new in self._run_batches(Waiting(queue), most, max(len(r.ids) for _, r in queue),
                                                      (most, greedy), auto):
            yield index, request, new

    # -- requests from any thread ------------------------------------------------------------------------------
    def submit(self, prompt: str | None = None, *, input_ids=None, params: Params | None = None, audio=None,
               language: str | None = None, task: str | None = None, timestamps: bool = False, **overrides):
        """Hand one request over from any thread and get its Ticket at once: iterate it for its Pieces, or call
        `result()` for its Result; `cancel()` stops it. The request is checked here (a bad one raises its one-line
        SpecdecError and nothing is queued). One that a batch can run joins the rows of this decoder's batcher
        (continuous batching, made on the first submit: at most 16 rows, 64 waiting; `batcher()` makes one of other
        sizes); any other (beam search, a draft model, logits processors, lenience < 1, a Whisper export's audio)
        runs alone on the decoder when its ticket is first read, in the thread that reads it. Parameters as for
        generate(). The batcher's thread waits idle between requests and keeps the decoder alive until the process
        ends; a decoder meant to be dropped should take requests through a `batcher()` it closes."""
        with self._batcher_lock:
            if self._batcher is None:
                self._batcher = self.batcher()
        return self._batcher.submit(prompt, input_ids=input_ids, params=params, audio=audio, language=language,
                                    task=task, timestamps=timestamps, **overrides)

    def admit(self, prompt=None, input_ids=None, params: Params | None = None, overrides: dict | None = None,
              audio=None, language: str | None = None, task: str | None = None, timestamps: bool = False) -> tuple:
        """Check a request as generate() checks it, without running it: (its checked Params, the Request a batch
        runs it as or None when it runs alone, and its checked input as generate() keywords: the token ids, or the
        audio samples with language and task). A bad request raises its one-line SpecdecError. On a decoder loaded
        with graph_capture every request runs alone (batches run the eager graphs, which it does not open)."""
        checked = Params.of(params, **(overrides or {})).checked(self.gamma_max)
        audio = self._samples(audio)
        if self._long(audio):       # checked window by window when it runs; its prompt's choices now
            make_prompt(self.manifest.speech, self.start_id, language, task, timestamps)
            self._plan(checked)
            return checked, None, {"audio": audio, "language": language, "task": task, "timestamps": timestamps}
        source, speech = self._input(prompt, input_ids, audio, language, task, timestamps)
        if speech is None:
            try:
                return checked, Request(source, checked, self._plan(checked, batch=True)), {"input_ids": source}
            except SpecdecError:        # a batch cannot run it: it runs alone, if its own plan holds
                pass
        self._plan(checked)
        given = {"input_ids": source} if speech is None else {"audio": source, "language": language, "task": task,
                                                               "timestamps": timestamps}
        return checked, None, given

    def _batch_request(self, prompt, input_ids, params, overrides: dict) -> Request:
        """A checked, planned request of a batch (what generate_batch and the batcher queue): a one-line SpecdecError
        if a batch cannot run it."""
        if self.manifest.speech is not None:
            raise SpecdecError("batches do not run on Whisper exports yet", "transcribe each audio with generate()")
        checked = Params.of(params, **overrides).checked(self.gamma_max)
        planned = self._plan(checked, batch=True)
        return Request(self._source(prompt, input_ids), checked, planned)

    def _batchable(self, params: Params) -> bool:
        """Whether generate_batch and the batcher run this checked request as a row of a batch (False: generate()
        runs it alone: beam search, logits processors, lenience < 1, a draft model, a decoder loaded with
        graph_capture)."""
        try:
            self._plan(params, batch=True)
        except SpecdecError:
            return False
        return self.manifest.speech is None

    @property
    def captured(self) -> bool:
        """Loaded with graph_capture=True: its models run the export's capturable graphs (no batches, no beams)."""
        return isinstance(self.target, CapturedSeq2Seq)

    def batcher(self, max_batch: int = 16, max_queue: int = 64):
        """A Batcher: requests submitted from any thread (`submit()`, which returns a Ticket) are decoded together,
        joining the running batch between rounds; at most `max_batch` rows, at most `max_queue` requests waiting."""
        from .scheduling.batcher import Batcher

        return Batcher(self, max_batch, max_queue, run=self._run_batches)

    def _run_batches(self, waiting, most: int, source_cap: int = 1, kind=None, switched: bool = True,
                     counters: dict | None = None):
        """Decode what `waiting` (decoding/strategies/batch.py Waiting) holds, and what joins it meanwhile, holding the decoder:
        yields (index, Request, new tokens). One BatchModel serves every batch, grown for the most rows asked."""
        with self._gate.held():
            model = self._batch_model
            if model is None or not model.fits(most, self.gamma_max):
                most_rows = max(most, model.most if model is not None else 0)
                model = self._batch_model = None      # its buffers go before the new ones are made
                model = self._batch_model = BatchModel(self.target, most_rows, self.gamma_max)
            model.layout(max(1, min(len(waiting), most)), source_cap)
            switch, acceptance = self.learned.batch_state(kind, switched)
            batching = Batching(model, self.eos_id, self.start_id, self.max_length, self.datastore, switch,
                                acceptance, counters, self.vocabulary.tokenizer_size)
            for row, new in batching.run(waiting, most):
                row.request.tick()
                yield row.index, row.request, new

    # -- beam search ------------------------------------------------------------------------------------------
    def beam_model(self, name: str) -> BeamModel:
        """The batched session of a model (target or a draft), opened on first use."""
        if name not in self._beam_models:
            model = self.target if name == "target" else self.models[name]
            self._beam_models[name] = BeamModel(model, buffers=2 if name == "target" else 3)
        return self._beam_models[name]

    def decode(self, token_ids) -> str:
        """Token ids to text through the export's tokenizer, special tokens dropped (what `Result.text` holds)."""
        return self.tokenizer.decode([int(t) for t in token_ids], skip_special_tokens=True)
