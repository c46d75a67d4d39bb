"""The export side's model families (export/families/): one family chosen from a checkpoint's config, and what
differs between families kept in the family's own modules."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from transformers import BartConfig, MT5Config, T5Config, WhisperConfig  # noqa: E402

from specdec.export.families import FAMILIES, family_of  # noqa: E402
from specdec.runtime.core.errors import SpecdecError  # noqa: E402


@pytest.mark.parametrize("config,name", [(T5Config(), "t5"), (MT5Config(), "t5"), (WhisperConfig(), "whisper")])
def test_the_family_is_chosen_from_the_config(config, name):
    assert family_of(config).name == name


def test_a_checkpoint_directory_is_read_for_its_family(tmp_path):
    T5Config(vocab_size=48, d_model=16, num_heads=2, num_layers=1).save_pretrained(str(tmp_path))
    assert family_of(str(tmp_path)).name == "t5"


def test_an_architecture_no_family_takes_is_one_line_naming_the_families():
    with pytest.raises(SpecdecError) as err:
        family_of(BartConfig(), name="some/bart")
    line = str(err.value)
    assert "\n" not in line and "'some/bart' is a 'bart' model" in line
    for family in FAMILIES:
        assert family.supported in line


def test_only_a_family_names_its_models():
    """Outside a family's own modules (and the list of families), the exporter does not name the speech family:
    it asks the family object instead."""
    import specdec.export

    root = Path(specdec.export.__file__).parent
    own = {"families/whisper.py", "families/whisper_encoder.py", "families/whisper_decoder.py",
           "families/ctranslate2_whisper.py", "families/whisper_drafts.py"}
    found = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in own:
            continue
        lines = [n for n, line in enumerate(path.read_text().splitlines(), 1)
                 if re.search(r"speech|whisper|audio", line, re.IGNORECASE)]
        if lines:
            found[rel] = lines
    assert list(found) == ["families/__init__.py"] and len(found["families/__init__.py"]) <= 2, found
