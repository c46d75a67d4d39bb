"""The scheduler: runs admitted requests (scheduling/admission.py) on a decoder's models, one at a time through its
gate: alone (speculative sampling or beam search, decoding/strategies/) or as rows of a batch, and owns the
batcher that submitted requests join. Nothing here calls up into SpeculativeDecoder; the façade only admits and
hands over."""

from __future__ import annotations

import threading
from dataclasses import replace

from ..core.errors import SpecdecError
from ..core.params import checked_max_batch
from ..core.stats import Piece, Pieces, Result, Stats
from ..decoding.learned import Learned
from ..decoding.strategies.batch import Batching, Waiting
from ..decoding.strategies.beam_search import BeamSearching
from ..decoding.strategies.sampling import Sampling
from ..engine.batch_model import BatchModel
from ..engine.beam_model import BeamModel
from ..engine.gate import Gate
from .admission import Admission, Admitted
from .batcher import Batcher


class Scheduler:
    """Runs a decoder's requests: `generate` / `stream` an Admitted alone, `batches` of rows, `submit` through the
    batcher. `learned` is the decoder's one learned-state object (decoding/learned.py)."""

    def __init__(self, admission: Admission, target, models: dict, workspace, learned: Learned, eos_id: int,
                 start_id: int, max_length: int, tokenizer, stream_idle_s: float = 30.0):
        self.admission, self.family = admission, admission.family
        self.target, self.models, self.workspace, self.learned = target, models, workspace, learned
        self.eos_id, self.start_id, self.max_length, self.tokenizer = eos_id, start_id, max_length, tokenizer
        self.gate = Gate(stream_idle_s)
        self._beam_models = {}          # name -> BeamModel, opened on the first beam search request
        self._batch_model = None        # the BatchModel every batch runs on, grown for the most rows asked
        self._batcher = None            # the Batcher submit() hands requests to, made on its first call
        self._batcher_lock = threading.Lock()

    def text(self, token_ids) -> str:
        """Token ids to text, special tokens dropped (what `Result.text` holds)."""
        return self.tokenizer.decode([int(t) for t in token_ids], skip_special_tokens=True)

    def learned_of(self, learned) -> Learned:
        """The Learned a request learns in: the decoder's, or one made by its `learning()`."""
        if learned is None:
            return self.learned
        if not isinstance(learned, Learned) or learned.models is not self.models:
            raise SpecdecError("learned= must come from this decoder's learning()",
                               "make one with decoder.learning(), or leave learned out")
        return learned

    # -- alone ---------------------------------------------------------------------------------------------
    def _strategy(self, admitted: Admitted, learned: Learned):
        planned = admitted.alone()
        if planned.where == "beams":
            draft = planned.source
            return BeamSearching(self.beam_model("target"), self.beam_model(draft) if draft else None,
                                 learned.beam_estimates, self.eos_id, self.start_id, self.max_length)
        return Sampling(self.workspace, self.target, learned.for_sampling(planned), self.eos_id, self.start_id,
                        self.max_length)

    def _serve(self, admitted: Admitted, learned):
        """The one request path: decode with the request's strategy, time every iteration. Yields (request, new
        tokens) per iteration; the request's stop_reason is set on the last."""
        strategy = self._strategy(admitted, self.learned_of(learned))
        request = admitted.request()
        for new in strategy.run(request):
            request.tick()
            yield request, new

    def _window(self, admitted: Admitted, learned):
        """How one window of a long input is decoded (its family calls it): the window's checked input with the
        request's plan, holding the decoder."""
        def run(window, stamps, seed):
            source, prompt = self.family.input(None, None, admitted.given, window, stamps)
            each = replace(admitted, params=replace(admitted.params, seed=seed % (1 << 64)), source=source,
                           prompt=prompt, whole=False, given={**admitted.given, "timestamps": stamps})
            with self.gate.held():
                return self._generate(each, learned)
        return run

    def generate(self, admitted: Admitted, learned=None) -> Result:
        """An admitted request's Result, holding the decoder."""
        if admitted.whole:
            return self.family.transcribe(admitted.given, admitted.params.seed, self._window(admitted, learned))
        with self.gate.held():
            return self._generate(admitted, learned)

    def _generate(self, admitted: Admitted, learned) -> Result:
        out, request = [], None
        for request, new in self._serve(admitted, learned):
            out.extend(new)
        return Result(self.text(out), out, request.stats, request.stop_reason, request.sequences or [out],
                      request.scores, segments=self.family.segments(out) if admitted.timestamps else [])

    def stream(self, admitted: Admitted, learned=None):
        """An admitted request's Pieces as its tokens are accepted; holds the decoder from the first to the last."""
        if admitted.alone().where == "beams":
            raise SpecdecError("beam search cannot stream: every beam may still lose until the search ends",
                               "use generate() with num_beams > 1, or stream with num_beams=1")
        if admitted.whole:
            yield from self.family.stream(admitted.given, admitted.params.seed, self._window(admitted, learned))
            return
        pieces = Pieces(self.text)
        hold = self.gate.acquire()
        try:
            for request, new in self._serve(admitted, learned):
                piece = pieces.add(new, request.stats, request.stop_reason)
                if admitted.timestamps and request.stop_reason:     # the last piece: the whole transcript's segments
                    piece.segments = self.family.segments(pieces.tokens)
                self.gate.pause(hold)       # the consumer has the piece; the decoder stays this stream's
                yield piece
                self.gate.resume(hold)      # raises if the stream lost the decoder meanwhile
        finally:
            self.gate.release(hold)

    # -- batches ----------------------------------------------------------------------------------------------
    def batches(self, waiting, most: int, source_cap: int = 1, kind=None, switched: bool = True,
                counters: dict | None = None):
        """Decode what `waiting` (decoding/strategies/batch.py Waiting) holds, and what joins it meanwhile, holding
        the decoder: yields (index, Request, new tokens). One BatchModel serves every batch, grown for the most rows
        asked."""
        with self.gate.held():
            model = self._batch_model
            gamma_max = self.admission.gamma_max
            if model is None or not model.fits(most, gamma_max):
                most_rows = max(most, model.most if model is not None else 0)
                model = self._batch_model = None      # its buffers go before the new ones are made
                model = self._batch_model = BatchModel(self.target, most_rows, gamma_max)
            model.layout(max(1, min(len(waiting), most)), source_cap)
            switch, acceptance = self.learned.batch_state(kind, switched)
            batching = Batching(model, self.eos_id, self.start_id, self.max_length, self.learned.datastore, switch,
                                acceptance, counters, self.learned.tokenizer_size)
            try:
                for row, new in batching.run(waiting, most):
                    row.request.tick()
                    yield row.index, row.request, new
            finally:
                model.release()     # its pages go back to the system until the next batch

    def batch(self, prompts, input_ids, params, max_batch: int, overrides: dict):
        """generate_batch's requests: each checked and planned as a row (a bad one becomes its error), then the good
        ones decoded in batches. Yields (index, Request or SpecdecError, new tokens)."""
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
                request = self.admission.row(item, None, p, overrides) if prompts is not None else \
                    self.admission.row(None, item, p, overrides)
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
        yield from self.batches(Waiting(queue), most, max(len(r.ids) for _, r in queue), (most, greedy), auto)

    def results(self, events) -> list:
        """One Result per request of `batch`'s events, in order (a bad request's has its error)."""
        outs: dict = {}
        results: dict = {}
        for index, request, new in events:
            if isinstance(request, SpecdecError):
                results[index] = Result("", [], Stats(), "", [], [], str(request))
                continue
            outs.setdefault(index, []).extend(new)
            if request.stop_reason:
                out = outs[index]
                results[index] = Result(self.text(out), out, request.stats, request.stop_reason, [out], [])
        return [results[i] for i in range(len(results))]

    def pieces(self, events):
        """(index, Piece) for each of `batch`'s events (a bad request's one Piece has its error as stop_reason)."""
        pieces: dict = {}           # index -> Pieces
        for index, request, new in events:
            if isinstance(request, SpecdecError):
                yield index, Piece([], "", None, f"error: {request}")
                continue
            yield index, pieces.setdefault(index, Pieces(self.text)).add(new, request.stats, request.stop_reason)

    def batcher(self, max_batch: int = 16, max_queue: int = 64):
        """A Batcher over this scheduler (scheduling/batcher.py)."""
        return Batcher(self, max_batch, max_queue)

    def submit(self, prompt=None, **request):
        """Hand a request to the decoder's own batcher (made on the first call); returns its ticket."""
        with self._batcher_lock:
            if self._batcher is None:
                self._batcher = self.batcher()
        return self._batcher.submit(prompt, **request)

    def source(self, params, learned=None):
        """The draft source a request's (draft, gamma) asks for; None for target-only decoding."""
        return self.learned_of(learned).for_sampling(self.admission.admit_plan(params))

    # -- beam search ------------------------------------------------------------------------------------------
    def beam_model(self, name: str) -> BeamModel:
        """The batched session of a model (target or a draft), opened on first use."""
        if name not in self._beam_models:
            model = self.target if name == "target" else self.models[name]
            self._beam_models[name] = BeamModel(model, buffers=2 if name == "target" else 3)
        return self._beam_models[name]
