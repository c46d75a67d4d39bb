"""Each ONNX Runtime run counts itself once (engine/device.py: Binder.run) in the stats of the requests it is for: a
beam search's runs in its request, a batch's runs in every row's request (one run serves all the live rows). And the
one head-binding object (engine/head.py) binds the declared head names and keeps each row's sampling parameters."""

from __future__ import annotations

import numpy as np
from tinymodels import random_prompts

from specdec.runtime import Params
from specdec.runtime.core.graph_io import HEAD_INPUTS, HEAD_OUTPUTS, LENIENCE, TEMPERATURE, TOP_K, TOP_P
from specdec.runtime.engine.device import Buffer
from specdec.runtime.engine.head import IDLE, Head, View


def test_every_batched_request_counts_its_encoder_and_each_run_it_was_in(related_decoder):
    """Rows join and leave mid-batch (12 prompts, at most 4 rows, different lengths): each request's ort_runs is its
    encoder run plus the batch runs it took part in (its target_calls), lookup rows and plain rows alike."""
    prompts = random_prompts(related_decoder.vocab_size, 12, seed=21)
    params = [Params(max_new_tokens=4 + 3 * i, draft="lookup" if i % 2 else "none", gamma=3)
              for i in range(len(prompts))]
    results = related_decoder.generate_batch(input_ids=prompts, params=params, max_batch=4)
    assert len({r.stats.target_calls for r in results}) > 2
    for r in results:
        assert not r.error and r.stats.target_calls > 0
        assert r.stats.ort_runs == 1 + r.stats.target_calls, r.stats
    assert sum(r.stats.proposed for r in results) > 0
    # a request alone afterwards is charged for its own runs only (the batch's rows are gone)
    alone = related_decoder.generate(input_ids=prompts[0], max_new_tokens=6, draft="none")
    assert alone.stats.ort_runs == 1 + alone.stats.target_calls == 1 + len(alone.token_ids)


def test_beam_search_counts_both_encoders_and_every_scoring_run(related_decoder):
    for prompt in random_prompts(related_decoder.vocab_size, 3, seed=22):
        plain = related_decoder.generate(input_ids=prompt, num_beams=3, max_new_tokens=10, draft="none").stats
        assert plain.draft_calls == 0 and plain.ort_runs == 1 + plain.target_calls
        spec = related_decoder.generate(input_ids=prompt, num_beams=3, max_new_tokens=10, draft="draft",
                                        gamma=2).stats
        assert spec.draft_calls > 0
        assert spec.ort_runs == 2 + spec.target_calls + spec.draft_calls      # the draft has its own encoder


def test_the_head_binds_the_declared_names_and_keeps_each_rows_parameters():
    vocab = 10
    head = Head(4, vocab, "cpu")
    q, u = Buffer((3 * vocab,), np.float32, "cpu"), Buffer((4,), np.float32, "cpu")
    inputs = head.inputs(q=View(q, (3, vocab)), uniforms=View(u, (4,)), rows=3)
    assert sorted(inputs) == sorted(HEAD_INPUTS)
    assert inputs[HEAD_INPUTS[0]] == View(q, (3, vocab)) and inputs[HEAD_INPUTS[1]] == View(u, (4,))
    assert all(inputs[name].shape == (3,) for name in (TEMPERATURE, TOP_K, TOP_P, LENIENCE))
    none = head.inputs()        # no guesses, no mask: zero rows; one zero uniform
    assert none[HEAD_INPUTS[0]].shape == none[HEAD_INPUTS[-1]].shape == (0, vocab)
    assert none[HEAD_INPUTS[1]].shape == (1,) and none[HEAD_INPUTS[1]].buffer.flat()[0] == 0.0
    assert sorted(head.outputs(*(View(u, (1,)),) * 3)) == sorted(HEAD_OUTPUTS)

    def values(name, count=4):
        return head.sampling[name].flat()[:count].tolist()

    assert all(values(name) == [IDLE[name]] * 4 for name in IDLE)     # idle until a request's are written
    head.set(Params(temperature=0.5, top_k=3, top_p=0.75, lenience=0.5), row=2)
    head.set(Params(temperature=1.0, top_k=0, top_p=1.0, lenience=1.0), row=0)
    assert values(TEMPERATURE) == [1.0, 0.0, 0.5, 0.0] and values(TOP_K) == [0, 0, 3, 0]
    head.reorder([2, 0], 3)     # row 0 takes row 2's, row 1 row 0's, row 2 idles
    assert values(TEMPERATURE, 3) == [0.5, 1.0, 0.0] and values(TOP_K, 3) == [3, 0, 0]
    assert values(TOP_P, 3) == [0.75, 1.0, 1.0] and values(LENIENCE, 3) == [0.5, 1.0, 1.0]
    head.set(None, row=0)
    assert values(TEMPERATURE, 3) == [0.0, 1.0, 0.0] and values(TOP_P, 3) == [1.0, 1.0, 1.0]
