"""Prompts the bundled pair was not trained or tuned on: descriptions of the Python distributions installed next to
specdec (their own package metadata, PyPI's wording, not Debian's descriptions that models/ was trained on), in the
bundled prompts' two tasks, as a JSONL file for `specdec-bench --prompts`:

    python -m benchmarks.unseen --out unseen.jsonl [--per-task 8]

summarize: the first paragraph of a distribution's long description with at least 25 words, cut to 60 words;
translate: its one-line summary. Distributions are taken in name order (so a machine with the same packages gets
the same file), skipping ones without such text and the project's own."""

from __future__ import annotations

import argparse
import json
import re
from importlib import metadata

SKIP = {"specdec"}
MARKUP = re.compile(r"[`*_#>|\[\]<]|https?://\S+|\(\S*\)")


def _clean(text: str) -> str:
    return " ".join(MARKUP.sub(" ", text).split())


def _paragraph(description: str) -> str | None:
    for block in re.split(r"\n\s*\n", description or ""):
        lines = [ln for ln in block.strip().splitlines() if ln.strip()]
        if not lines or any(ln.lstrip().startswith(("..", ":", "=", "-", "+", "$", ">>>", "!", "<", "```", "|"))
                            for ln in lines):
            continue
        words = _clean(" ".join(lines)).split()
        if len(words) >= 25 and words[-1][-1:] in ".:;!)":
            return " ".join(words[:60])
    return None


def unseen(per_task: int = 8) -> list[dict]:
    dists = sorted({d.metadata["Name"].lower(): d for d in metadata.distributions()
                    if d.metadata["Name"]}.items())
    summarize, translate = [], []
    for name, dist in dists:
        if name in SKIP:
            continue
        meta = dist.metadata
        summary = _clean(meta.get("Summary") or "")
        para = _paragraph(meta.get_payload() or meta.get("Description") or "")
        if para and len(summarize) < per_task:
            summarize.append({"task": "summarize", "source": "summarize: " + para, "package": name})
        elif 6 <= len(summary.split()) <= 30 and len(translate) < per_task:
            translate.append({"task": "translate", "source": "translate English to German: " + summary,
                              "package": name})
        if len(summarize) >= per_task and len(translate) >= per_task:
            break
    return [row for pair in zip(summarize, translate) for row in pair]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.unseen", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the JSONL file to write")
    ap.add_argument("--per-task", type=int, default=8, help="prompts per task (default 8)")
    args = ap.parse_args(argv)
    rows = unseen(args.per_task)
    with open(args.out, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {len(rows)} prompts ({args.per_task} a task at most) to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
