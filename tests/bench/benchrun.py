"""Helpers the specdec-bench tests share: run the CLI in-process, write a tiny-vocabulary prompt file, check numbers."""

from __future__ import annotations

import contextlib
import io
import json
import math

from specdec.bench import cli


def run(argv):
    """(exit code, stdout, stderr) of `specdec-bench argv`, run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def prompts_file(path, per_task: int):
    """`per_task` prompts of each task in the tiny vocabulary; summarize sources repeat n-grams (something for a
    lookup to copy)."""
    lines = []
    for i in range(per_task):
        lines.append(json.dumps({"task": "summarize", "input_ids": [5 + i, 6, 7, 8, 5 + i, 6, 7, 8, 9, 1]}))
        lines.append(json.dumps({"task": "translate", "input_ids": [10 + i, 20, 30 + i, 1]}))
    path.write_text("\n".join(lines) + "\n")
    return path


def finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
