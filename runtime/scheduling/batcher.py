"""Requests from any number of threads decoded together: one thread runs a batch (runtime/decoding/strategies/batch.py)
and requests join it between rounds as they arrive (continuous batching), each with its own parameters.

    server = dec.batcher(max_batch=16, max_queue=64)
    ticket = server.submit("summarize: ...", max_new_tokens=64)     # from any thread; returns at once
    for piece in ticket:                                             # pieces as they are accepted
        print(piece.text, end="")
    result = server.submit(input_ids=[13, 8, 1]).result()            # or wait for the whole Result
    ticket.cancel()                                                  # its row is freed at the next round
    server.close()

`submit` is the one entry for every request (SpeculativeDecoder.submit hands requests to its scheduler's batcher;
the Triton handler to its): one that a batch cannot run (beam search, a draft model, logits processors,
lenience < 1, a model family that does not batch; any request on a decoder loaded with graph_capture) gets an `Alone`
ticket, read the same way, which runs it on the decoder by itself when it is first read. A request is checked and
planned once, in `submit` (scheduling/admission.py; a one-line SpecdecError there, nothing queued). Past `max_queue`
waiting requests, `submit` raises at once ("the batcher is busy") instead of queueing without bound. The batch holds the
decoder (its gate) while it runs and gives it back when no request is left, so generate() from other threads waits for
it as for any request.
"""

from __future__ import annotations

import queue
import threading

from ..core.errors import SpecdecError, first_line
from ..core.params import Params, checked_max_batch
from ..core.stats import Pieces, Result, Stats
from ..decoding.request import Request
from ..decoding.strategies.batch import Waiting
from .admission import Admitted

_END = object()


class Ticket:
    """One submitted request: iterate it for its pieces (core/stats.py Piece), or `result()` for its Result."""

    def __init__(self, batcher: "Batcher", request: Request):
        self.request, self._batcher = request, batcher
        self._queue: queue.Queue = queue.Queue()
        self._pieces = Pieces(batcher.scheduler.text)
        self.error: SpecdecError | None = None
        self._done = False               # the end was taken from the queue

    def _put(self, new: list) -> None:
        self._queue.put(self._pieces.add(new, self.request.stats, self.request.stop_reason))
        if self.request.stop_reason:
            self._end()

    def _fail(self, error: SpecdecError) -> None:
        self.error = error
        self._end()

    def _end(self) -> None:
        with self._batcher._wake:
            self._batcher._open.discard(self)
        self._queue.put(_END)

    def __iter__(self):
        """The pieces not taken yet (a second iteration, or result() after one, takes what is left: maybe none)."""
        while not self._done:
            piece = self._queue.get()
            if piece is _END:
                self._done = True
                break
            yield piece
        if self.error is not None:
            raise self.error

    def result(self) -> Result:
        """The whole request's Result, reading whatever of its stream is left (an error it met is raised)."""
        for _ in self:
            pass
        out = list(self._pieces.tokens)
        return Result(self._pieces.shown, out, self.request.stats, self.request.stop_reason, [out], [])

    def cancel(self) -> None:
        """Stop the request: a waiting one leaves the queue, a running one its row at the next round (stop reason
        "cancelled"). Its tokens so far stay in the ticket."""
        if self._batcher.waiting.cancel(self.request):
            self.request.stop_reason = "cancelled"
            self._end()


class Alone:
    """A submitted request that a batch cannot run (beam search, a draft model, logits processors, lenience < 1, a
    model family that does not batch), checked when it was submitted: it runs alone on the decoder, between batches,
    when it is first read and in the thread that reads it: iterating it streams, as SpeculativeDecoder.stream (beam
    search cannot stream: its one-line SpecdecError); `result()` before any iteration generates, as generate(), beam
    search included. Like a stream it holds the decoder from its first piece to its end: leaving a `for` loop over it
    early (its iterator closed or dropped) cancels it and frees the decoder. `cancel()` may come from any thread: before
    the first read the request never runs; during a read, the reader stops at the next piece. Reading two requests
    in turn from one thread ends the first (the decoder's gate belongs to a thread: as for two streams)."""

    def __init__(self, scheduler, admitted: Admitted):
        self._scheduler, self._admitted = scheduler, admitted
        self._stream = None
        self._tokens, self._stats, self._stop = [], None, ""
        self._reader = 0                 # which iterator reads now (an older one that is dropped changes nothing)
        self._cancel = False
        self.error: SpecdecError | None = None
        self._done: Result | None = None

    def __iter__(self):
        """The pieces not taken yet."""
        self._reader += 1
        me = self._reader
        if self.error is not None:
            raise self.error
        if self._done is not None or self._stop:
            return
        if self._cancel:
            self._stop = "cancelled"
            return
        if self._stream is None:
            self._stream = self._scheduler.stream(self._admitted)
        try:
            for piece in self._stream:
                self._tokens += piece.token_ids
                self._stats, self._stop = piece.stats, piece.stop_reason
                yield piece
                if self._cancel and not self._stop:
                    break
        except SpecdecError as err:
            self.error = err
            raise
        finally:
            if me == self._reader and not self._stop and self.error is None:
                self._close()            # left early, or cancelled: the decoder is free again

    def result(self) -> Result:
        """Wait for the ticket's request and return its Result (stop reason "cancelled" if it was); raises its error."""
        if self.error is not None:
            raise self.error
        if self._done is None:
            if self._stream is None and not self._cancel:
                try:
                    self._done = self._scheduler.generate(self._admitted)
                except SpecdecError as err:
                    self.error = err
                    raise
                return self._done
            for _ in self:
                pass
            out = list(self._tokens)
            self._done = Result(self._scheduler.text(out), out, self._stats or Stats(), self._stop, [out], [])
        return self._done

    def cancel(self) -> None:
        """Stop the request (stop reason "cancelled"; its tokens so far stay): not run at all when nothing read it
        yet; a no-op after its end."""
        self._cancel = True
        if self._stream is not None and not self._stop:
            try:
                self._close()
            except ValueError:           # being read in another thread now: the reader stops at its next piece
                pass

    def _close(self) -> None:
        self._stream.close()
        self._stop = "cancelled"


class Batcher:
    """Continuous batching (made by `SpeculativeDecoder.batcher()`): a thread decodes the submitted requests
    together, each joining the running batch between rounds and leaving when it ends; `close()` stops it. The
    `scheduler` (scheduling/scheduler.py) admits the requests and runs the batches, holding the decoder."""

    def __init__(self, scheduler, max_batch: int = 16, max_queue: int = 64):
        checked_max_batch(max_batch)
        if type(max_queue) is not int or max_queue < 0:
            raise SpecdecError(f"max_queue must be a non-negative integer (got {max_queue!r})")
        self.scheduler, self.max_batch, self.max_queue = scheduler, max_batch, max_queue
        self.waiting = Waiting()
        self.counters = {"rounds": 0, "rows": 0}     # batched target runs so far, and the rows they carried
        self._open: set = set()          # tickets not ended (under _wake): what a failed batch must end
        self._wake = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="specdec-batcher", daemon=True)
        self._thread.start()

    def submit(self, prompt: str | None = None, *, input_ids=None, params: Params | None = None, **overrides):
        """Hand a request over (checked here: a bad one raises its one-line SpecdecError and queues nothing): one a
        batch can run is queued for a row (a Ticket); any other gets an Alone ticket, which runs it on the decoder
        when it is first read. Parameters as for SpeculativeDecoder.generate()."""
        if self._closed:
            raise SpecdecError("this batcher is closed", "make another with decoder.batcher()")
        admitted = self.scheduler.admission.admit(prompt, input_ids, params, overrides)
        if admitted.row is None:
            return Alone(self.scheduler, admitted)
        ticket = Ticket(self, admitted.row)
        with self._wake:
            if len(self.waiting) >= self.max_queue:
                raise SpecdecError(f"the batcher is busy: {len(self.waiting)} requests wait for a row (max_queue "
                                   f"{self.max_queue})", "retry later, or raise max_queue")
            self._open.add(ticket)
            self.waiting.put((ticket, admitted.row))
            self._wake.notify()
        return ticket

    def close(self) -> None:
        """Stop taking requests; the running ones finish first."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not len(self.waiting) and not self._closed:
                    self._wake.wait()
                if self._closed and not len(self.waiting):
                    return
            try:
                for ticket, _, new in self.scheduler.batches(self.waiting, self.max_batch, kind="batcher",
                                                             counters=self.counters):
                    ticket._put(new)
            except SpecdecError as err:
                self._fail_taken(err)
            except Exception as err:         # keep serving: the requests of this batch get the error
                self._fail_taken(SpecdecError(f"the batch failed: {type(err).__name__}: {first_line(err, 200)}",
                                              "this is a specdec bug, please report it; the batcher stays usable"))

    def _fail_taken(self, error: SpecdecError) -> None:
        """End with `error` every ticket the failed batch had taken (running, or joining when it failed); the ones
        still waiting go into the next batch. A batch that failed before taking any request (opening its model, say)
        would fail the same way for the next: the oldest waiting request then ends with the error, so each failure
        ends at least one request and the loop never spins on the same queue."""
        with self._wake:
            waiting = {id(request) for request in self.waiting.requests()}
            taken = [t for t in self._open if id(t.request) not in waiting]
            if not taken:
                oldest = self.waiting.take()
                taken = [oldest[0]] if oldest is not None else []
            for ticket in taken:
                ticket._fail(error)
