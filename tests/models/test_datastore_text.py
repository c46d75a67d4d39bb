"""The bundled datastore text (models/datastore/, the models recipe's `datastore` stage) is the training split's
target side only: no reference of the held-out prompts the benchmark and the evaluation score is in it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

MODELS = Path(__file__).resolve().parents[2] / "models"


def normalized(text: str) -> str:
    return " ".join(text.split())


def test_the_datastore_holds_no_test_reference():
    with gzip.open(MODELS / "datastore" / "train-targets.txt.gz", "rt", encoding="utf-8") as fh:
        lines = [line.rstrip("\n") for line in fh]
    info = json.loads((MODELS / "datastore" / "info.json").read_text())
    assert len(lines) == info["lines"] > 50_000
    prompts = [json.loads(line) for line in (MODELS / "prompts" / "test.jsonl").read_text().splitlines()]
    references = {normalized(p["reference"]) for p in prompts}
    assert len(references) > 300
    assert not references & set(lines)
    # nor inside a longer line: every test reference of 8 words or more (shorter ones, such as "Documentation for
    # X", may be common phrases)
    text = "\n".join(lines)
    long = [r for r in references if len(r.split()) >= 8]
    assert len(long) > 100 and not [r for r in long if r in text]
