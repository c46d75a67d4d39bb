"""Batched decoding (runtime/decoding/strategies/batch.py, runtime/engine/batch_model.py): many requests share every
target run, each row with its own length, source, parameters and uniforms.

Exactness per row: greedy output of every row equals that prompt generated alone (which test_greedy.py holds
against PyTorch), with rows of mixed lengths joining and leaving mid-batch, for target-only rows, lookup rows and
the datastore; the output distribution of every row at T = 1 and with top-k equals the target's, enumerated
(test_distribution.py's reference and chi-square), with a deliberately broken control that the test catches.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_datastore_decoder import stored  # noqa: F401  (fixture: an export with a datastore of its own outputs)
from test_distribution import (P_PASS, P_TEETH, PROMPT, SETTINGS, TOKENS, chi_square_p, exact_distribution,
                               small_datastore)
from tinymodels import random_prompts

from specdec.runtime import Params, SpecdecError, SpeculativeDecoder
from specdec.runtime.engine.batch_model import BatchModel


def alone(dec, prompts, **kw):
    return [dec.generate(input_ids=p, draft="none", **kw).token_ids for p in prompts]


@pytest.mark.parametrize("draft,gamma", [("none", "auto"), ("lookup", 3), ("lookup", 8), ("auto", "auto")])
def test_every_row_equals_the_prompt_generated_alone(related_decoder, draft, gamma):
    """20 prompts of 3-14 tokens, at most 6 rows at a time: rows join and leave mid-batch, and the batch shrinks."""
    prompts = random_prompts(related_decoder.vocab_size, 20, seed=3)
    ref = alone(related_decoder, prompts, max_new_tokens=24)
    results = related_decoder.generate_batch(input_ids=prompts, draft=draft, gamma=gamma, max_new_tokens=24,
                                             max_batch=6)
    assert [r.token_ids for r in results] == ref
    assert all(r.stop_reason in ("eos", "max_new_tokens") and not r.error for r in results)
    if draft == "lookup":
        assert sum(r.stats.proposed for r in results) > 50
        assert 0 < sum(r.stats.accepted for r in results) < sum(r.stats.proposed for r in results)


def test_batches_of_one_to_sixteen_and_per_row_params(related_decoder):
    """B = 1, 4, 16 at once; each row its own max_new_tokens and draft; the same answers as alone."""
    prompts = random_prompts(related_decoder.vocab_size, 16, seed=5)
    lengths = [3 + (i * 7) % 20 for i in range(16)]
    params = [Params(max_new_tokens=n, draft="lookup" if i % 2 else "none", gamma=4) for i, n in enumerate(lengths)]
    ref = [related_decoder.generate(input_ids=p, draft="none", max_new_tokens=n).token_ids
           for p, n in zip(prompts, lengths)]
    for batch in (1, 4, 16):
        results = related_decoder.generate_batch(input_ids=prompts, params=params, max_batch=batch)
        assert [r.token_ids for r in results] == ref, batch


def test_rows_that_join_together_share_encoder_runs(related_decoder, monkeypatch):
    """generate_batch of 12 sources of 3-14 ids: with room for all, the runs encoder_groups gives for their lengths
    (fewer than the sources); with 4 rows, the first 4 together and later ones as rows free up. The same tokens as
    alone either way; each request counts its encoder run once in ort_runs and a share of its seconds in
    encoder_s."""
    from specdec.runtime.engine.batch_model import encoder_groups

    prompts = random_prompts(related_decoder.vocab_size, 12, seed=9)
    ref = alone(related_decoder, prompts, max_new_tokens=10)
    runs = []
    real = BatchModel._encoder_run
    monkeypatch.setattr(BatchModel, "_encoder_run", lambda self, part, out, width: runs.append(
        sorted(len(j[1]) for j in part)) or real(self, part, out, width))
    results = related_decoder.generate_batch(input_ids=prompts, max_new_tokens=10, max_batch=12, draft="none")
    assert [r.token_ids for r in results] == ref
    lengths = [len(p) for p in prompts]
    assert runs == [sorted(lengths[i] for i in g) for g in encoder_groups(lengths)] and len(runs) < 12, runs
    runs.clear()
    results = related_decoder.generate_batch(input_ids=prompts, max_new_tokens=10, max_batch=4, draft="none")
    assert [r.token_ids for r in results] == ref
    assert sum(map(len, runs)) == 12 and len(runs) < 12, runs
    assert all(r.stats.encoder_s > 0 and r.stats.ort_runs == 1 + r.stats.target_calls for r in results)


def _partitions(items):
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _partitions(rest):
        for i in range(len(part)):
            yield part[:i] + [[first] + part[i]] + part[i + 1:]
        yield [[first]] + part


def test_encoder_groups_are_the_cheapest_split():
    """Against every partition of up to 7 sources (brute force, no sorting assumed): the split costs RUN_TOKENS a run
    plus each run's sources times its longest, and every source is in exactly one run. Equal lengths: one run; a
    long source beside short ones: a run of its own."""
    from specdec.runtime.engine.batch_model import RUN_TOKENS, encoder_groups

    def cost(groups, lengths):
        return sum(RUN_TOKENS + len(g) * max(lengths[i] for i in g) for g in groups)

    rng = np.random.default_rng(0)
    for trial in range(300):
        n = int(rng.integers(1, 8))
        lengths = [int(x) for x in rng.integers(1, 60, size=n)]
        groups = encoder_groups(lengths)
        assert sorted(i for g in groups for i in g) == list(range(n))
        assert cost(groups, lengths) == min(cost(p, lengths) for p in _partitions(list(range(n)))), (lengths, groups)
    assert encoder_groups([20] * 8) == [list(range(8))]
    assert encoder_groups([5, 6, 90, 4]) == [[3, 0, 1], [2]]


def test_rows_near_max_length(related_decoder):
    """max_length 64: rows that reach it stop as they do alone, the others go on."""
    prompts = random_prompts(related_decoder.vocab_size, 6, seed=8)
    ref = [related_decoder.generate(input_ids=p, draft="none", max_new_tokens=200) for p in prompts]
    results = related_decoder.generate_batch(input_ids=prompts, draft="lookup", gamma=8, max_new_tokens=200)
    assert [r.token_ids for r in results] == [r.token_ids for r in ref]
    assert [r.stop_reason for r in results] == [r.stop_reason for r in ref]


def test_datastore_rows_equal_alone(stored):  # noqa: F811
    export, prompts_a, prompts_b = stored
    dec = SpeculativeDecoder.load(export, provider="cpu")
    prompts = prompts_a + prompts_b
    ref = alone(dec, prompts, max_new_tokens=24)
    results = dec.generate_batch(input_ids=prompts, draft="lookup", gamma=8, max_new_tokens=24, max_batch=8)
    assert [r.token_ids for r in results] == ref
    assert sum(r.stats.accepted for r in results) > 100, "the datastore holds these outputs: rows must copy them"
    assert any("datastore" in r.stats.sources for r in results)


def test_stream_batch_pieces_add_up(related_decoder):
    prompts = random_prompts(related_decoder.vocab_size, 5, seed=9)
    ref = alone(related_decoder, prompts, max_new_tokens=16)
    got = {i: [] for i in range(5)}
    last = {}
    for index, piece in related_decoder.stream_batch(input_ids=prompts, draft="lookup", gamma=3, max_new_tokens=16,
                                                     max_batch=3):
        assert index not in last, "a request yielded after its last piece"
        got[index] += piece.token_ids
        if piece.stop_reason:
            last[index] = piece
    assert [got[i] for i in range(5)] == ref
    assert sorted(last) == list(range(5))


def test_bad_input(related_decoder):
    dec = related_decoder
    prompts = random_prompts(dec.vocab_size, 4, seed=2)
    for call, message in ((lambda: dec.generate_batch(input_ids=[]), "the batch is empty"),
                          (lambda: dec.generate_batch(input_ids=prompts, max_batch=0), "max_batch must be"),
                          (lambda: dec.generate_batch(input_ids=prompts, max_batch=10 ** 6), "max_batch must be"),
                          (lambda: dec.generate_batch("a prompt"), "takes a list of prompts"),
                          (lambda: dec.generate_batch(input_ids=prompts, params=[Params()]), "params has 1 entries")):
        with pytest.raises(SpecdecError) as err:
            call()
        assert message in str(err.value) and "\n" not in str(err.value)
    # one bad row fails alone, with its one-line error; the others finish
    rows = [prompts[0], [dec.vocab_size + 5], prompts[1], prompts[2], prompts[3]]
    params = [Params(max_new_tokens=8), Params(max_new_tokens=8), Params(max_new_tokens=8, temperature=-1),
              Params(max_new_tokens=8, draft="draft"), Params(max_new_tokens=8, num_beams=2)]
    results = dec.generate_batch(input_ids=rows, params=params)
    assert results[0].token_ids == dec.generate(input_ids=prompts[0], max_new_tokens=8).token_ids
    for r, words in zip(results[1:], ("outside the vocabulary", "temperature", "does not run in a batch",
                                      "beam search cannot run in a batch")):
        assert words in r.error and "\n" not in r.error and r.token_ids == [], (words, r.error)
    assert dec.generate(input_ids=prompts[0], max_new_tokens=8).token_ids == results[0].token_ids   # still usable


# -- distributions ---------------------------------------------------------------------------------------------------
# N = 20,000 requests of the 3-token test (test_distribution.py) in one generate_batch call, at most 16 rows at a
# time, every request its own seed, two prompts alternating (row b's neighbours decode the other prompt), the lookup
# with the small datastore at gamma 2 so that rows copy, keep and reject guesses. Pass: chi-square p >= 1e-3 for
# each prompt against its own enumerated distribution. Broken controls: the same batch where each joining request's
# encoder output lands in the next row (a row reads another row's source), and one whose joining sources are encoded
# together without their lengths (the shorter attends to its padding; measured p = 2e-11): p < 1e-6.
N_BATCH = 20_000
OTHER = [4, 6, 3, 3, 7, 1]


def batch_counts(dec, settings, prompts=(PROMPT, OTHER), n=N_BATCH) -> list:
    inputs = [prompts[i % len(prompts)] for i in range(n)]
    params = [Params(max_new_tokens=TOKENS, gamma=2, draft="lookup", seed=i, **settings) for i in range(n)]
    results = dec.generate_batch(input_ids=inputs, params=params, max_batch=16)
    counts = [{} for _ in prompts]
    for i, r in enumerate(results):
        out = tuple(r.token_ids)
        counts[i % len(prompts)][out] = counts[i % len(prompts)].get(out, 0) + 1
    return counts, results


@pytest.fixture(scope="module")
def batch_decoder(small_vocab_pair, tmp_path_factory):
    dec = SpeculativeDecoder.load(small_vocab_pair[1], provider="cpu")
    dec.datastore = small_datastore(tmp_path_factory.mktemp("store"), dec.vocabulary.tokenizer_size)
    return dec


@pytest.mark.parametrize("name", ["temperature", "top_k"])
def test_every_row_keeps_the_target_distribution(name, small_vocab_pair, batch_decoder):
    settings = SETTINGS[name]
    counts, results = batch_counts(batch_decoder, settings)
    for prompt, count in zip((PROMPT, OTHER), counts):
        p_value = chi_square_p(count, exact_distribution(small_vocab_pair[0], prompt=prompt, **settings))
        assert p_value >= P_PASS, f"batched lookup, {name}, prompt {prompt}: chi-square p = {p_value:.3g}"
    proposed, accepted = sum(r.stats.proposed for r in results), sum(r.stats.accepted for r in results)
    assert 0 < accepted < proposed and proposed >= 5000, (proposed, accepted)


class WrongRow(BatchModel):
    """A joining request's row reads the cross-attention K/V of the next row (deliberately broken): another
    request's source, mostly the other prompt's."""

    def join(self, joining):
        super().join(joining)
        for row, *_ in joining:
            other = (row + 1) % self.capacity
            self.cross_rows[:, :, row] = self.cross_rows[:, :, other]
            self.sources[row] = self.sources[other]
            self.buf["source_lengths"].write([self.sources[row]], row)


def test_the_batch_test_has_teeth(small_vocab_pair, monkeypatch, tmp_path):
    import specdec.runtime.scheduling.scheduler as scheduler_module

    monkeypatch.setattr(scheduler_module, "BatchModel", WrongRow)
    wrong = SpeculativeDecoder.load(small_vocab_pair[1], provider="cpu")      # its batches run on a WrongRow
    wrong.datastore = small_datastore(tmp_path, wrong.vocabulary.tokenizer_size)
    settings = SETTINGS["temperature"]
    counts, _ = batch_counts(wrong, settings)
    p_values = [chi_square_p(count, exact_distribution(small_vocab_pair[0], prompt=prompt, **settings))
                for prompt, count in zip((PROMPT, OTHER), counts)]
    assert min(p_values) < P_TEETH, f"a row reading another row's source passed the chi-square test ({p_values})"


class Unmasked(BatchModel):
    """The joining requests' sources encoded in one run without their lengths (deliberately broken): a source
    shorter than the run's longest attends to its padding."""

    def _encoder_run(self, part, out, width):
        write = self.source_rows.write
        self.source_rows.write = lambda values, offset=0: write([-1] * len(values), offset)
        try:
            super()._encoder_run(part, out, width)
        finally:
            del self.source_rows.write


def test_the_batched_encoder_test_has_teeth(small_vocab_pair, monkeypatch, tmp_path):
    """The batches above encode joining requests together (PROMPT, 5 ids, beside OTHER, 6): with the padding
    attended, the chi-square test fails."""
    import specdec.runtime.scheduling.scheduler as scheduler_module

    monkeypatch.setattr(scheduler_module, "BatchModel", Unmasked)
    wrong = SpeculativeDecoder.load(small_vocab_pair[1], provider="cpu")
    wrong.datastore = small_datastore(tmp_path, wrong.vocabulary.tokenizer_size)
    settings = SETTINGS["temperature"]
    counts, _ = batch_counts(wrong, settings)
    assert wrong.scheduler._batch_model.batched_encoder
    p_values = [chi_square_p(count, exact_distribution(small_vocab_pair[0], prompt=prompt, **settings))
                for prompt, count in zip((PROMPT, OTHER), counts)]
    assert min(p_values) < P_TEETH, f"sources encoded with their padding passed the chi-square test ({p_values})"


def test_beam_search_batches_and_batch_one_share_one_session(related_pair, monkeypatch):
    """Beam search and batched requests run on the model's one batch-free session, and once it is open batch-1
    requests run there too: after a beam request the models' batch-1 decoder sessions are gone (the weights are
    held once), a batch opens no session of its own, and greedy requests alone (target only, draft model, lookup)
    give what they gave on the batch-1 sessions."""
    import gc
    import weakref

    import specdec.runtime.engine.model as model_module

    dec = SpeculativeDecoder.load(related_pair[2], provider="cpu")
    prompts = random_prompts(dec.vocab_size, 3, seed=4)
    drafts = ("none", "draft", "lookup")
    before = [dec.generate(input_ids=p, draft=d, max_new_tokens=12).token_ids for d in drafts for p in prompts]
    models = (dec.target, dec.models["draft"])
    batch_one = [weakref.ref(model.decoder.session) for model in models]
    dec.generate(input_ids=prompts[0], num_beams=3, max_new_tokens=8, draft="draft")
    gc.collect()
    assert [session() for session in batch_one] == [None, None]      # freed: no second copy of the weights
    for model in models:
        assert model.decoder.session is model.free_session()
    opened = []
    real = model_module.create_session
    monkeypatch.setattr(model_module, "create_session", lambda *a, **k: opened.append(a) or real(*a, **k))
    results = dec.generate_batch(input_ids=prompts, max_new_tokens=8)
    assert [r.token_ids for r in results] == alone(dec, prompts, max_new_tokens=8)
    assert [dec.generate(input_ids=p, draft=d, max_new_tokens=12).token_ids for d in drafts for p in prompts] == before
    assert opened == []
    assert dec.scheduler.beam_model("target").decoder.session is dec.target.free_session()
