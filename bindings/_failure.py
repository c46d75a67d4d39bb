"""A failed C API call: the status it returns and the one line specdec_last_error() gives (bindings/_capi.py and the
families' modules of calls beside it raise it; they import it from here)."""

from __future__ import annotations

from specdec.runtime import SpecdecError


class Failure(Exception):
    """A failed call: a specdec_status and the one-line message for specdec_last_error()."""

    def __init__(self, status: int, problem: str, fix: str | None = None):
        super().__init__(str(SpecdecError(problem, fix)))
        self.status = status
