"""Paths named by an export directory stay inside it.

Export directories travel (copied to boards, downloaded, mounted read-only), so every path that comes from one --
the manifest's `files`, graph files and tokenizer, and the external-data locations inside the graphs -- is checked
before anything is opened:

  - lexically: a relative POSIX path, already normalized (no empty, `.` or `..` parts, no leading `/`), made of
    plain parts (letters, digits and `._+-`, not starting with a dot), at most MAX_PATH_CHARS long. This refuses
    absolute paths, `..`, backslashes and drive letters, NUL and line breaks, `~`, and ONNX Runtime's in-memory tag
    `*/_ORT_MEM_ADDR_/*` in one rule, without guessing how a platform would read the path;
  - after resolving symlinks: the file must lie inside the export directory (itself resolved, so the directory may
    be reached through a symlink), which refuses a symlink out of it at any level.

`inside` returns the resolved path, so what is opened afterwards is the file that was checked. Any problem is a
one-line SpecdecError naming the path and the fix.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from ..core.errors import SpecdecError

MAX_PATH_CHARS = 512
_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]*")
FIX = "an export names only files inside its own directory, as specdec-export writes them; re-export it, or copy " \
      "the export again from a trusted source"


def shown(value, limit: int = 80) -> str:
    """A value from an untrusted file, quoted for a one-line message: JSON-escaped (no line breaks), ASCII, cut."""
    try:
        text = json.dumps(value, ensure_ascii=True)
    except (TypeError, ValueError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def lexical_problem(relative) -> str | None:
    """Why `relative` is not a plain relative path (None when it is one)."""
    if not isinstance(relative, str):
        return f"is a {type(relative).__name__}, not a path string"
    if not relative:
        return "is empty"
    if len(relative) > MAX_PATH_CHARS:
        return f"is {len(relative)} characters long (at most {MAX_PATH_CHARS})"
    if relative.startswith("/") or relative.startswith("\\") or re.match(r"[A-Za-z]:", relative):
        return "is an absolute path"
    parts = relative.split("/")
    if ".." in parts:
        return "has a '..' part"
    if any(part in ("", ".") for part in parts):
        return "is not normalized (empty or '.' parts)"
    if not all(_PART.fullmatch(part) for part in parts):
        return "has characters other than letters, digits and ._+- or a part starting with a dot"
    return None


def inside(root: Path, relative, what: str = "a path in manifest.json", base: str = "") -> Path:
    """The resolved path of `relative` (read from the export at `root`), joined to the folder `base` inside it; a
    SpecdecError unless it stays inside `root` and, when `base` is given, inside `base` too (ONNX Runtime only reads
    external data from the graph's own folder). `what` names the path's origin in the message."""
    problem = lexical_problem(relative)
    if problem is not None:
        raise SpecdecError(f"{what} {shown(relative)} {problem}", FIX)
    real_root = Path(os.path.realpath(root))
    fence = Path(os.path.realpath(Path(root, base))) if base else real_root
    real = Path(os.path.realpath(Path(root, base, relative)))
    for limit, name in ((real_root, "the export directory"), (fence, f"the folder {shown(base)}")):
        if real != limit and limit not in real.parents:
            raise SpecdecError(f"{what} {shown(relative)} leads outside {name} (a symlink to {shown(str(real))})",
                               FIX)
    return real
