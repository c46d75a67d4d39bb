"""Draft sources by name, chains and the auto choice: greedy output equals target-only decoding and PyTorch for every
source, chain (up to three models under the target) and gamma; a model that lagged far behind catches up exactly;
bad names are one-line errors that leave the decoder usable. Distributions: test_distribution_chains.py."""

import pytest
import torch
from transformers import T5ForConditionalGeneration

from tinymodels import random_prompts, run_export_cli

from specdec.runtime import DraftSource, ModelDraft, Params, Proposal, SpecdecError

MAX_NEW = 24
SOURCES = ["draft", "mid", "lookup", "lookup,draft", "draft,mid", "lookup,mid", "lookup,draft,mid", "auto"]


def reference(model, ids):
    with torch.no_grad():
        ref = model.generate(torch.tensor([ids]), max_new_tokens=MAX_NEW, do_sample=False)[0, 1:].tolist()
    return ref[:ref.index(1) + 1] if 1 in ref else ref          # generate pads after EOS; specdec stops there


def test_every_source_and_chain_is_greedy_exact(related_pair, related_decoder):
    dec = related_decoder
    model = T5ForConditionalGeneration.from_pretrained(str(related_pair[0])).eval()
    levels = {}
    for ids in random_prompts(48, 12, seed=21):
        ref = reference(model, ids)
        assert dec.generate(input_ids=ids, max_new_tokens=MAX_NEW, gamma=0).token_ids == ref
        for source in SOURCES:
            for gamma in (1, 3, 8, "auto"):
                res = dec.generate(input_ids=ids, max_new_tokens=MAX_NEW, gamma=gamma, draft=source)
                assert res.token_ids == ref, f"draft={source} gamma={gamma} prompt={ids}"
                for name, s in res.stats.sources.items():
                    got = levels.setdefault(name, [0, 0])
                    got[0], got[1] = got[0] + s.proposed, got[1] + s.accepted
    # every level of every chain proposed, and had guesses both kept and rejected (else the test proves little)
    for name in ("draft", "draft,mid", "lookup,draft,mid", "draft>", "lookup,draft>", "lookup>"):
        proposed, accepted = levels[name]
        assert 0 < accepted < proposed, (name, levels[name])


class LateModel(DraftSource):
    """A model draft that proposes nothing for the first `idle` rounds: its cache then lags far behind the target."""

    def __init__(self, model, idle):
        self.inner, self.idle, self.name = ModelDraft(model), idle, "late"

    def start(self, source_ids, stats):
        self.inner.start(source_ids, stats)
        self.rounds = 0

    def propose(self, ws, k, rows, row, stats):
        self.rounds += 1
        return Proposal(0) if self.rounds <= self.idle else self.inner.propose(ws, k, rows, row, stats)

    def commit(self, ws, verdict):
        self.inner.commit(ws, verdict)


def test_a_model_far_behind_catches_up_exactly(related_decoder):
    dec = related_decoder
    width = dec.models["draft"].logits.shape[0]
    for ids in random_prompts(48, 6, seed=22):
        ref = dec.generate(input_ids=ids, max_new_tokens=40, gamma=0).token_ids
        late = LateModel(dec.models["draft"], idle=width + 3)        # more missed tokens than one run can take
        res = dec.generate(input_ids=ids, max_new_tokens=40, gamma=3, draft=late)
        assert res.token_ids == ref
        if len(ref) > width + 6:
            assert res.stats.proposed > 0


@pytest.mark.parametrize("bad, message", [
    ("bogus", "unknown draft 'bogus'"),
    ("lookup,big", "unknown draft 'big' in chain 'lookup,big'"),
    ("", "is empty"),
    ("lookup,,draft", "empty level"),
    ("draft,lookup", "can only be the first level"),
    ("draft,draft", "names a level twice"),
    ("auto,draft", "cannot be chain levels"),
    (7, "draft must be a name"),
])
def test_bad_draft_names_are_one_line_errors(related_decoder, bad, message):
    dec = related_decoder
    before = dec.generate(input_ids=[5, 6, 7, 1], max_new_tokens=8, gamma=0).token_ids
    with pytest.raises(SpecdecError, match=message) as err:
        dec.generate(input_ids=[5, 6, 7, 1], max_new_tokens=8, draft=bad)
    text = str(err.value)
    assert "\n" not in text
    if isinstance(bad, str):
        assert "lookup" in text and "auto" in text or "first level" in text       # the choices are named
    assert dec.generate(input_ids=[5, 6, 7, 1], max_new_tokens=8, draft="lookup,draft").token_ids == before


def test_auto_learns_and_can_forget(related_decoder):
    dec = related_decoder
    dec.reset_estimates()
    for ids in random_prompts(48, 4, seed=23):
        dec.generate(input_ids=ids, max_new_tokens=MAX_NEW)
    assert dec.estimates.target.sums[0] > 0 and dec.estimates.round > 0
    dec.reset_estimates()
    assert dec.estimates.target.sums[0] == 0 and dec.estimates.round == 0


def test_a_learned_object_passed_explicitly_learns_alone_and_decodes_the_same(related_decoder):
    """learned=: a request learns in the object it is given (decoder.learning()), not in decoder.learned, and gives
    the same greedy output (what is learned changes speed, never the output); beam search learns there too; an
    object of another decoder's models, or of another type, is a one-line error and the decoder stays usable."""
    dec = related_decoder
    dec.reset_estimates()
    mine, bare = dec.learning(), dec.learning(datastore=False)
    assert mine is not dec.learned and bare.datastore is None and mine.estimates is not dec.estimates
    for ids in random_prompts(48, 3, seed=29):
        ours = dec.generate(input_ids=ids, max_new_tokens=MAX_NEW, learned=mine)
        assert ours.token_ids == dec.generate(input_ids=ids, max_new_tokens=MAX_NEW, draft="none").token_ids
        assert list(dec.stream(input_ids=ids, max_new_tokens=MAX_NEW, learned=bare))[-1].stop_reason
    assert mine.estimates.round > 0 and bare.estimates.round > 0
    assert dec.estimates.round == 0 and dec.estimates.target.sums[0] == 0      # the decoder's own learned nothing
    dec.generate(input_ids=[5, 6, 7, 1], max_new_tokens=8, num_beams=2, gamma="auto", draft="draft", learned=mine)
    assert mine.beam_estimates.rates() and not dec.beam_estimates.rates()
    assert dec.scheduler.source(Params(draft="auto"), learned=mine) is not dec.scheduler.source(Params(draft="auto"))
    mine.reset()
    assert mine.estimates.round == 0
    for wrong in (object(), type(dec.learned)({}, None)):
        with pytest.raises(SpecdecError) as err:
            dec.generate(input_ids=[5, 6, 7, 1], max_new_tokens=4, learned=wrong)
        assert "\n" not in str(err.value) and "learning()" in str(err.value)
    assert dec.generate(input_ids=[5, 6, 7, 1], max_new_tokens=4).token_ids


@pytest.mark.parametrize("args, message", [
    (["--draft", "small=d"], "the first --draft is the default draft"),
    (["--draft", "d", "--draft", "lookup=e"], "draft name 'lookup' is not allowed"),
    (["--draft", "d", "--draft", "m=e", "--draft", "m=f"], "two --draft models are named 'm'"),
])
def test_export_draft_names_are_checked(tmp_path, args, message):
    code, stdout, stderr = run_export_cli(["--target", "t", *args, "--export", tmp_path / "x"])
    assert code != 0
    assert message in stderr and len(stderr.strip().splitlines()) == 1
