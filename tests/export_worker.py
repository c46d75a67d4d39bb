"""A subprocess that opens export directories with SpeculativeDecoder.load, one JSON line per case, so that a
directory that crashes or hangs the loader fails its case and not the test run. Used by the fuzz tests and the
hostile-directory tests.

    PythonWorker(good, stderr_path)            .open(case, timeout) -> the load's outcome; .close()
    python tests/export_worker.py worker GOOD  the worker's own entry point
"""

from __future__ import annotations


import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

from hostile_exports import PROMPT




# -- opening case directories in a worker process --------------------------------------------------------------------
def _worker(good: str) -> int:
    """Read case directories from stdin and open each: answer one JSON line with the load's outcome once the good
    decoder (loaded first) has generated its reference tokens again, then, for a directory that loaded, a second
    line with what generating from it did ("run"). A crash while generating is then told apart from one while
    loading: the first line is out already."""
    import traceback

    from specdec.runtime import SpecdecError, SpeculativeDecoder

    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)                       # anything else printed goes to stderr, not into the protocol
    decoder = SpeculativeDecoder.load(good, provider="cpu", threads=1)
    reference = decoder.generate(input_ids=PROMPT, max_new_tokens=6, gamma=2).token_ids
    out.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        case = line.rstrip("\n")
        result, bad = {"case": case}, None
        try:
            bad = SpeculativeDecoder.load(case, provider="cpu", threads=1)
            result["outcome"] = "loaded"
        except SpecdecError as err:
            result.update(outcome="refused", message=str(err))
        except BaseException as err:  # noqa: BLE001 -- what the harness looks for
            result.update(outcome="traceback", message=f"{type(err).__name__}: {err}"[:2000],
                          traceback=traceback.format_exc()[-3000:])
        try:
            result["good"] = decoder.generate(input_ids=PROMPT, max_new_tokens=6, gamma=2).token_ids == reference
        except BaseException as err:  # noqa: BLE001
            result["good"] = f"{type(err).__name__}: {err}"
        out.write(json.dumps(result) + "\n")
        if bad is not None:
            try:
                bad.generate(input_ids=PROMPT, max_new_tokens=4, gamma=2)
                run = "ok"
            except SpecdecError as err:
                run = f"refused: {err}"
            except BaseException as err:  # noqa: BLE001
                run = f"raised {type(err).__name__}: {str(err)[:300]}"
            del bad
            out.write(json.dumps({"run": run}) + "\n")
    return 0


class PythonWorker:
    """A worker subprocess (above), restarted after a crash or a hang. open(case, timeout) -> result dict with
    "outcome" (of the load): refused / loaded / traceback / crash (the worker died) / hang (no answer in time);
    "good" (the good decoder's tokens unchanged afterwards); for a loaded case "run" (generating from it): ok,
    "refused: ...", "raised ...", crash or hang."""

    def __init__(self, good, stderr_path):
        self.good, self.stderr_path = str(good), Path(stderr_path)
        self.proc = None
        self.pending = b""          # read from the worker, not yet answered (lines are split here, not by a buffered
                                    # reader, so that select() never waits for a line that is already read)

    def _start(self, timeout: float = 300) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen([sys.executable, __file__, "worker", self.good], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err, env=env, bufsize=0)
        self.pending = b""
        ready = self._answer(timeout)
        if not (ready and ready.get("ready")):
            raise RuntimeError(f"the fuzz worker did not start: {ready}; see {self.stderr_path}")

    def _answer(self, timeout: float):
        """The next JSON line; None after `timeout` seconds without one (the worker is killed), {} if it died."""
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.pending:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                self.close()
                return None
            data = os.read(fd, 1 << 16)
            if not data:
                self.proc.wait()
                return {}
            self.pending += data
        line, _, self.pending = self.pending.partition(b"\n")
        return json.loads(line)

    def _failed(self, answer) -> str:
        if answer is None:
            return "hang"
        code = self.proc.returncode if self.proc is not None else None
        self.proc = None
        return "crash" if code is None or code < 0 else f"crash (exit {code})"

    def open(self, case, timeout: float) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        began = time.perf_counter()
        self.proc.stdin.write(f"{case}\n".encode())
        answer = self._answer(timeout)
        if not answer:
            return {"case": str(case), "outcome": self._failed(answer)}
        answer["seconds"] = time.perf_counter() - began
        if answer["outcome"] == "loaded":
            run = self._answer(timeout)
            answer["run"] = run["run"] if run else self._failed(run)
        return answer

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "worker":
        sys.exit(_worker(sys.argv[2]))
    sys.exit("usage: python tests/export_worker.py worker GOOD_EXPORT")
