"""One request at a time on a decoder: its sessions, caches and device buffers belong to the request that holds it.

A decoder's public entry points (generate, beam search, reset_estimates, and a stream while it is being iterated)
take the gate; a second caller waits for the one before it. A stream holds the gate from its first piece until it
ends, is closed or is garbage-collected, so no other request can touch its caches between two pieces. Two rules
keep an abandoned stream from blocking the decoder forever:

- a stream that is not being advanced (its consumer is elsewhere) for more than `idle_s` seconds while another
  caller waits loses the gate; its next piece raises a one-line SpecdecError saying so;
- a thread that starts another request while it holds an unfinished stream of the same decoder has moved on from
  it (one thread cannot iterate both at once): the stream loses the gate at once, with the same error.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

from ..core.errors import SpecdecError


class Hold:
    """The gate held by one request: which thread, whether it is computing (busy) or paused at a yield."""

    __slots__ = ("thread", "busy", "paused_at", "ended_by")

    def __init__(self):
        self.thread = threading.get_ident()
        self.busy = True
        self.paused_at = 0.0
        self.ended_by = ""          # why the gate was taken from this hold (a stream), "" while it holds it


class Gate:
    def __init__(self, idle_s: float = 30.0):
        self.idle_s = float(idle_s)
        self._cond = threading.Condition()
        self._holder: Hold | None = None

    def acquire(self) -> Hold:
        """Wait for the gate; return this request's hold (busy)."""
        me = threading.get_ident()
        with self._cond:
            while self._holder is not None:
                held = self._holder
                if held.thread == me and held.busy:
                    raise SpecdecError("a request was started on this decoder from inside another of its requests",
                                       "finish the first request before starting the next")
                if not held.busy:
                    if held.thread == me:
                        self._take(held, "its thread started another request on the same decoder")
                        break
                    idle = time.monotonic() - held.paused_at
                    if idle >= self.idle_s:
                        self._take(held, f"it was not advanced for {idle:.0f} s while another request waited "
                                         f"(the decoder's stream_idle_s is {self.idle_s:g} s)")
                        break
                    self._cond.wait(self.idle_s - idle)
                else:
                    self._cond.wait()
            hold = Hold()
            self._holder = hold
            return hold

    def _take(self, held: Hold, why: str) -> None:
        held.ended_by = why
        self._holder = None

    def release(self, hold: Hold) -> None:
        with self._cond:
            if self._holder is hold:
                self._holder = None
                self._cond.notify_all()

    def pause(self, hold: Hold) -> None:
        """A stream hands a piece to its consumer: it keeps the gate, but waiters may time it out from now."""
        with self._cond:
            hold.busy, hold.paused_at = False, time.monotonic()
            self._cond.notify_all()

    def resume(self, hold: Hold) -> None:
        """A stream is asked for its next piece: busy again, or a one-line error if it lost the gate meanwhile."""
        with self._cond:
            if hold.ended_by:
                raise SpecdecError(f"this stream was ended because {hold.ended_by}",
                                   "iterate a stream to its end (or close it) before starting another request, "
                                   "or start the request again")
            hold.busy = True

    @contextmanager
    def held(self):
        """Hold the gate for the length of a with block (a whole generate() or reset_estimates())."""
        hold = self.acquire()
        try:
            yield hold
        finally:
            self.release(hold)
