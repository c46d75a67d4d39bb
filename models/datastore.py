"""Stage `datastore`: the text the bundled pair's export indexes for the lookup (runtime/loading/datastore.py).

The *training* split's target side only: the German translations and the English synopses the target learned to
write, one a line, in the training file's order, duplicates kept (how often a continuation occurs is what the index
ranks by). A line that is also a reference of the validation or test split (the same synopsis written for packages
of two splits, say) is left out, so nothing the evaluation or the benchmark scores is in the datastore. Written as
``models/datastore/train-targets.txt.gz`` (gzip with no timestamp: the same data gives the same bytes);
``specdec-export`` with no model arguments indexes it into the export directory.
"""

from __future__ import annotations

import gzip
import json
import os

from .data import load_jsonl

FILE = "train-targets.txt.gz"


def normalized(text: str) -> str:
    return " ".join(text.split())


def run_datastore(work_dir: str, out_dir: str) -> dict:
    data = os.path.join(work_dir, "data")
    held_out = {normalized(r["reference"]) for split in ("validation", "test")
                for r in load_jsonl(os.path.join(data, f"{split}.jsonl"))}
    lines, dropped = [], 0
    for r in load_jsonl(os.path.join(data, "train.jsonl")):
        text = normalized(r["reference"])
        if not text:
            continue
        if text in held_out:
            dropped += 1
            continue
        lines.append(text)
    folder = os.path.join(out_dir, "datastore")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, FILE)
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as fh:
        fh.write(("\n".join(lines) + "\n").encode("utf-8"))
    info = {"file": FILE, "lines": len(lines), "left_out_as_held_out_references": dropped,
            "bytes": os.path.getsize(path)}
    with open(os.path.join(folder, "info.json"), "w") as fh:
        json.dump(info, fh, indent=1)
        fh.write("\n")
    print(json.dumps(info), flush=True)
    return info
