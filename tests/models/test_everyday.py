"""The everyday sentences a Whisper draft is distilled on (models/everyday.py) are none of the benchmark's held-out
ones, and no template is a paraphrase of one (at most 70 % of a template's own words in any held-out sentence)."""

from __future__ import annotations

import re

from specdec.bench.whisper_clips import SENTENCES
from specdec.models import everyday
from specdec.models.whisper_draft import _plan


def _words(text: str) -> set:
    return set(re.findall(r"[a-z']+", text.lower()))


def test_the_training_sentences_are_none_of_the_held_out_ones():
    held = {s.lower() for _, s in SENTENCES}
    made = [text for _, text, *_ in _plan(2048, 0)]          # the shipped draft's data: --clips 2048, seed 0
    assert len(set(made)) == 2048 and not held & {s.lower() for s in made}


def test_no_template_paraphrases_a_held_out_sentence():
    for _, template in everyday.TEMPLATES:
        own = _words(re.sub(r"\{\w+\}", "", template))
        worst = max(len(own & _words(s)) / max(1, len(own)) for _, s in SENTENCES)
        assert worst <= 0.7, template


def test_the_sentences_are_reproducible_and_varied():
    first, again = everyday.sentences(500, seed=3), everyday.sentences(500, seed=3)
    assert first == again and len({kind for kind, _ in first}) >= 8
    assert everyday.sentences(500, seed=4) != first
