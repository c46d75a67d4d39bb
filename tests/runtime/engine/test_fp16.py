"""An fp16 export (weights and KV cache in fp16, `specdec-export --dtype fp16`) loads and decodes on the CPU
provider, exactly: every draft source, at a fixed gamma and at auto, gives the greedy output of target-only decoding
on the same export, token for token. (The fp16 graphs' logits against PyTorch are checked in
tests/export/test_parity.py; this is the runtime's side: fp16 KV-cache buffers, their rollback and the verify run.)"""

import pytest

from specdec.runtime import SpeculativeDecoder
from tinymodels import export_pair
from tinymodels import random_prompts as prompts

N_PROMPTS = 12
MAX_NEW = 16


@pytest.fixture(scope="module")
def fp16_decoder(related_pair, tmp_path_factory):
    """related_pair (a target whose greedy outputs vary, a noisy copy of it as the draft) exported in fp16."""
    out = export_pair(*related_pair[:2], tmp_path_factory.mktemp("fp16") / "export", "--dtype", "fp16",
                      "--gamma-max", "4", "--max-length", "48")
    return SpeculativeDecoder.load(out, provider="cpu", threads=1)


def test_an_fp16_export_decodes_exactly_with_every_source(fp16_decoder):
    dec = fp16_decoder
    assert dec.manifest.dtype == "fp16", dec.manifest.dtype
    proposed = accepted = 0
    outputs = set()
    for ids in prompts(48, N_PROMPTS):
        want = dec.generate(input_ids=ids, max_new_tokens=MAX_NEW, gamma=0).token_ids
        assert want, ids
        outputs.add(tuple(want))
        for draft in ("draft", "lookup", "lookup,draft", "auto"):
            for gamma in (3, "auto"):
                res = dec.generate(input_ids=ids, max_new_tokens=MAX_NEW, draft=draft, gamma=gamma)
                assert res.token_ids == want, (draft, gamma, ids)
                proposed += res.stats.proposed
                accepted += res.stats.accepted
    # it says something only if outputs vary and guesses were both kept and rejected
    assert len(outputs) >= 4 and 0 < accepted < proposed, (len(outputs), accepted, proposed)
