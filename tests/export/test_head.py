"""The speculative head (export/head.py) against the NumPy reference in numpy_sampler.py: the head alone
(head_only_model, the very nodes every exported decoder carries) for the math, and an exported decoder for the
wiring (its head reads the decoder's own logits and input_ids)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import numpy_sampler as ref
from specdec.export.head import CANDIDATES, INPUTS, OUTPUTS, head_only_model

VOCAB = 50          # not the vocabulary of any test model
WIDE = CANDIDATES + 344     # wider than the TopK candidates: exercises the cutoff search and its full-sort fallback


@pytest.fixture(scope="module")
def head():
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(head_only_model().SerializeToString(), opts, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def broken_head():
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(head_only_model(residual=False).SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


def seed_of(*values) -> int:
    return zlib.crc32(repr(values).encode())


def scalars(temperature, top_k, top_p, lenience=1.0):
    return {"temperature": np.array([temperature], np.float32), "top_k": np.array([top_k], np.int64),
            "top_p": np.array([top_p], np.float32), "lenience": np.array([lenience], np.float32)}


def run_head(session, logits, input_ids, draft_probs, uniforms, temperature, top_k=0, top_p=1.0, lenience=1.0,
             mask=None, batch_logits=None, batch_ids=None):
    """-> (probs [G+1, V], n, next token). `mask`: the logit_mask rows (none: [0, V]); batch_logits/batch_ids: whole
    batches [B, N, ...] to feed instead of batch 1 (the head reads row 0)."""
    logits = np.asarray(logits, np.float32)
    vocab = logits.shape[-1]
    probs, accepted, next_token = session.run(list(OUTPUTS), {
        "logits": logits[None] if batch_logits is None else batch_logits,
        "input_ids": np.asarray(input_ids, np.int64)[None] if batch_ids is None else batch_ids,
        "draft_probs": np.asarray(draft_probs, np.float32).reshape(-1, vocab),
        "uniforms": np.asarray(uniforms, np.float32), **scalars(temperature, top_k, top_p, lenience),
        "logit_mask": np.zeros((0, vocab), np.float32) if mask is None else np.asarray(mask, np.float32)})
    assert accepted.shape == (1,) and next_token.shape == (1,)
    return probs, int(accepted[0]), int(next_token[0])


def run_sample(session, logits, uniforms, temperature, top_k=0, top_p=1.0):
    """A plain step (G = 0) per row: -> (probs [rows, V], tokens [rows])."""
    vocab = logits.shape[-1]
    out = [run_head(session, row[None], [7], np.zeros((0, vocab)), [u], temperature, top_k, top_p)
           for row, u in zip(logits, uniforms)]
    return np.concatenate([o[0] for o in out]), np.array([o[2] for o in out], np.int64)


def run_verify(session, target_logits, draft_probs, draft_tokens, uniforms, temperature, top_k=0, top_p=1.0,
               lenience=1.0):
    """Verify G guesses: the head sees N = G+1 positions, input_ids = [current, x_1 .. x_G]."""
    ids = [3, *np.asarray(draft_tokens).tolist()]
    _, n, token = run_head(session, target_logits, ids, draft_probs, uniforms, temperature, top_k, top_p, lenience)
    return n, token


def test_head_inputs_and_outputs_are_the_contract(head):
    assert [i.name for i in head.get_inputs()] == ["input_ids", "logits", *INPUTS]
    assert [o.name for o in head.get_outputs()] == list(OUTPUTS)


def random_logits(rng, rows, vocab=VOCAB, scale=2.5):
    return (rng.standard_normal((rows, vocab)) * scale).astype(np.float32)


def edge_uniforms(rng, rows):
    u = rng.random(rows).astype(np.float32)
    u[:3] = [0.0, 0.99999, 0.5]             # u = 0 must give the first token with mass
    return u


# (vocab, temperature, top_k, top_p)
SAMPLE_CASES = [
    (VOCAB, 1.0, 0, 1.0),
    (VOCAB, 0.6, 0, 1.0),
    (VOCAB, 1.7, 0, 1.0),
    (VOCAB, 0.0, 0, 1.0),
    (VOCAB, 0.0, 5, 0.5),
    (VOCAB, 1.0, 5, 1.0),
    (VOCAB, 1.0, 1, 1.0),
    (VOCAB, 1.0, VOCAB + 7, 1.0),
    (VOCAB, 0.8, 0, 0.9),
    (VOCAB, 1.0, 0, 0.5),
    (VOCAB, 1.0, 0, 1e-4),
    (VOCAB, 1.3, 12, 0.7),
    # wider than the candidates: top-k inside them, top-k beyond them (full sort), a nucleus inside them, a
    # nucleus that needs more than CANDIDATES tokens (full sort), top-k = V
    (WIDE, 1.0, 40, 1.0),
    (WIDE, 1.0, CANDIDATES + 30, 1.0),
    (WIDE, 1.0, CANDIDATES + 30, 0.95),
    (WIDE, 0.7, 0, 0.9),
    (WIDE, 3.0, 0, 0.98),
    (WIDE, 1.0, WIDE, 1.0),
]


@pytest.mark.parametrize("vocab,temperature,top_k,top_p", SAMPLE_CASES)
def test_sample_matches_reference(head, vocab, temperature, top_k, top_p):
    rng = np.random.default_rng(seed_of(vocab, temperature, top_k, top_p))
    rows = 40
    logits = random_logits(rng, rows, vocab)
    uniforms = edge_uniforms(rng, rows)
    probs, tokens = run_sample(head, logits, uniforms, temperature, top_k, top_p)
    want_probs, want_tokens = ref.sample(logits, uniforms, temperature, top_k, top_p)

    assert probs.shape == (rows, vocab) and tokens.shape == (rows,)
    np.testing.assert_allclose(probs, want_probs, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(tokens, want_tokens)
    assert np.all(probs[np.arange(rows), tokens] > 0), "drew a zero-mass token"

    support = (want_probs > 0).sum(-1)
    if temperature == 0:
        np.testing.assert_array_equal(tokens, logits.argmax(-1))
        assert np.all(support == 1)
    elif top_k and top_k < vocab and top_p >= 1.0:
        assert np.all(support == top_k)
    elif top_p < 1.0:
        assert np.all(support < vocab) and np.any(support > 1 if top_p >= 0.5 else support == 1)
        if vocab == WIDE and temperature >= 3.0:
            assert np.all(support > CANDIDATES), "the nucleus should need the full-sort fallback here"
    else:
        assert np.all(support == vocab)
    assert tokens[0] == np.flatnonzero(want_probs[0])[0]


def test_top_p_boundary_keeps_the_token_that_reaches_top_p(head):
    """Masses 0.5, 0.3, 0.2: the token whose mass crosses top_p is kept (0.51 needs two tokens, 0.81 three)."""
    logits = np.log(np.array([[0.5, 0.3, 0.2], [0.2, 0.5, 0.3]], np.float32))
    uniforms = np.array([0.999, 0.999], np.float32)
    for top_p, support in ((0.49, 1), (0.51, 2), (0.79, 2), (0.81, 3)):
        probs, tokens = run_sample(head, logits, uniforms, 1.0, 0, top_p)
        want, want_tokens = ref.sample(logits, uniforms, 1.0, 0, top_p)
        np.testing.assert_allclose(probs, want, atol=1e-6)
        np.testing.assert_array_equal(tokens, want_tokens)
        assert np.all((probs > 0).sum(-1) == support), (top_p, probs)


def test_filters_that_keep_everything_equal_no_filter(head):
    """top_k = V goes through the filter branch (and its full sort); it must give the unfiltered result."""
    rng = np.random.default_rng(7)
    logits, uniforms = random_logits(rng, 16, WIDE), rng.random(16).astype(np.float32)
    a = run_sample(head, logits, uniforms, 0.9)
    b = run_sample(head, logits, uniforms, 0.9, WIDE, 1.0)
    np.testing.assert_allclose(a[0], b[0], atol=1e-7)
    np.testing.assert_array_equal(a[1], b[1])


# --- verify ----------------------------------------------------------------------------------------------------

def verify_inputs(rng, gamma, temperature, top_k, top_p, vocab=VOCAB):
    """Target logits and a draft that is a noisy copy of them (as a real draft is), draft tokens drawn from q."""
    target_logits = random_logits(rng, gamma + 1, vocab)
    draft_logits = (target_logits[:gamma] + random_logits(rng, gamma, vocab, scale=1.5)).astype(np.float32)
    q = (ref.standardize(draft_logits, temperature, top_k, top_p) if gamma else np.zeros((0, vocab))).astype(np.float32)
    tokens = np.array([ref.draw(row, u) for row, u in zip(q, rng.random(gamma))], np.int64)
    return target_logits, q, tokens


VERIFY_SETTINGS = [  # temperature, top_k, top_p, lenience
    (1.0, 0, 1.0, 1.0),
    (0.7, 0, 1.0, 0.5),
    (0.0, 0, 1.0, 1.0),
    (0.0, 0, 1.0, 0.3),
    (0.0, 10, 0.9, 0.5),
    (1.0, 8, 1.0, 1.0),
    (1.2, 0, 0.8, 1.0),
    (0.9, 10, 0.9, 0.7),
]


@pytest.mark.parametrize("temperature,top_k,top_p,lenience", VERIFY_SETTINGS)
def test_verify_matches_reference_on_random_steps(head, temperature, top_k, top_p, lenience):
    rng = np.random.default_rng(seed_of(temperature, top_k, top_p, lenience))
    seen = set()
    for trial in range(60):
        gamma = (1, 3, 8, 0)[trial % 4]
        target_logits, q, tokens = verify_inputs(rng, gamma, temperature, top_k, top_p)
        if temperature == 0 and trial % 2 and gamma:
            tokens[: gamma // 2 + 1] = target_logits[: gamma // 2 + 1].argmax(-1)   # make greedy accepts happen
            q = ref.standardize(np.eye(VOCAB)[tokens] * 10, 0.0).astype(np.float32)
        uniforms = rng.random(gamma + 1).astype(np.float32)
        n, token = run_verify(head, target_logits, q, tokens, uniforms, temperature, top_k, top_p, lenience)
        want_n, want_token, detail = ref.verify(target_logits, q, tokens, uniforms, temperature, top_k, top_p,
                                                lenience)
        assert (n, token) == (want_n, want_token), (trial, gamma)
        assert detail["dist"][token] > 0
        if gamma:
            seen.add("none" if n == gamma else "first" if n == 0 else "middle")
    assert "first" in seen and len(seen) >= 2, seen


def forced_case(rng, gamma, reject_at, temperature, top_k, top_p, lenience):
    """Inputs whose first rejection is at `reject_at` (None: every guess kept)."""
    target_logits, q, _ = verify_inputs(rng, gamma, temperature, top_k, top_p)
    p = ref.standardize(target_logits, temperature, top_k, top_p)
    tokens = np.zeros(gamma, np.int64)
    uniforms = rng.random(gamma + 1).astype(np.float32)
    stop = gamma if reject_at is None else reject_at
    for i in range(stop):                      # kept: a token both put mass on, r = 0
        both = np.flatnonzero((p[i] > 0) & (q[i] > 0))
        if temperature == 0:
            tokens[i] = int(np.argmax(p[i]))
            q[i] = np.eye(VOCAB)[tokens[i]]
        else:
            tokens[i] = both[np.argmax(p[i, both] / q[i, both])]
        uniforms[i] = 0.0
    if reject_at is not None:                  # rejected: the token with the smallest p/q, r close to 1
        i = reject_at
        support = np.flatnonzero(q[i] > 0)
        tokens[i] = support[np.argmin(p[i, support] / q[i, support])]
        assert p[i, tokens[i]] / (lenience * q[i, tokens[i]]) < 0.99
        uniforms[i] = 0.995
    return target_logits, q.astype(np.float32), tokens, uniforms


@pytest.mark.parametrize("temperature,top_k,top_p,lenience", [
    (1.0, 0, 1.0, 1.0), (0.8, 0, 1.0, 0.6), (1.0, 6, 0.9, 1.0), (0.0, 0, 1.0, 1.0)])
@pytest.mark.parametrize("reject_at", [0, 2, None], ids=["reject-first", "reject-middle", "no-reject"])
def test_verify_forced_cases(head, temperature, top_k, top_p, lenience, reject_at):
    gamma = 5
    rng = np.random.default_rng(11 + (reject_at or 9))
    if temperature == 0:
        target_logits, _, _ = verify_inputs(rng, gamma, 1.0, 0, 1.0)
        argmax = target_logits.argmax(-1)
        tokens = argmax[:gamma].copy()
        if reject_at is not None:
            tokens[reject_at] = (argmax[reject_at] + 1) % VOCAB
        q = np.eye(VOCAB, dtype=np.float32)[tokens]
        uniforms = rng.random(gamma + 1).astype(np.float32)
    else:
        target_logits, q, tokens, uniforms = forced_case(rng, gamma, reject_at, temperature, top_k, top_p, lenience)
    n, token = run_verify(head, target_logits, q, tokens, uniforms, temperature, top_k, top_p, lenience)
    want_n, want_token, detail = ref.verify(target_logits, q, tokens, uniforms, temperature, top_k, top_p, lenience)
    expected_n = gamma if reject_at is None else reject_at
    assert want_n == expected_n, "the constructed case did not happen in the reference"
    assert n == expected_n
    assert token == want_token
    p = detail["p"]
    if reject_at is None:
        assert detail["dist"] is p[gamma] or np.allclose(detail["dist"], p[gamma])
    if temperature == 0:
        # greedy: the next token is the target's argmax at position n, whatever the uniforms
        assert token == int(target_logits[n].argmax())
    else:
        # after a rejection the residual excludes the rejected guess when l = 1 (p(x) < q(x) there)
        if reject_at is not None and lenience == 1.0:
            assert detail["dist"][tokens[reject_at]] == 0


def test_verify_residual_draw_is_not_a_plain_draw_from_p(head, broken_head):
    """With uniforms chosen so that a draw from p and a draw from the residual differ, the graph follows the
    residual (a sampler that ignores q would pass the accept tests but not this one)."""
    rng = np.random.default_rng(3)
    found = 0
    for _ in range(40):
        target_logits, q, tokens, uniforms = forced_case(rng, 3, 0, 1.0, 0, 1.0, 1.0)
        uniforms[3] = rng.random()
        p = ref.standardize(target_logits, 1.0)
        plain = ref.draw(p[0], uniforms[3])
        n, token = run_verify(head, target_logits, q, tokens, uniforms, 1.0)
        want_n, want_token, _ = ref.verify(target_logits, q, tokens, uniforms, 1.0)
        assert (n, token) == (want_n, want_token) and n == 0
        # the deliberately broken head (the distribution tests' control) draws from p instead
        assert run_verify(broken_head, target_logits, q, tokens, uniforms, 1.0) == (0, plain)
        found += plain != want_token
    assert found >= 5


def test_verify_lenience_changes_acceptance(head):
    """A guess with p/q = 0.6 at r = 0.7: rejected at l = 1, kept at l = 0.5 (0.6/0.5 > 0.7)."""
    p = np.array([0.3, 0.3, 0.2, 0.2])
    q = np.array([[0.5, 0.1, 0.2, 0.2]], np.float32)
    target_logits = np.log(np.stack([p, p])).astype(np.float32)
    uniforms = np.array([0.7, 0.3], np.float32)
    results = {}
    for lenience in (1.0, 0.5):
        got = run_verify(head, target_logits, q, [0], uniforms, 1.0, lenience=lenience)
        want = ref.verify(target_logits, q, [0], uniforms, 1.0, lenience=lenience)[:2]
        assert got == want
        results[lenience] = got[0]
    assert results == {1.0: 0, 0.5: 1}


def test_greedy_lenience_keeps_a_guess_within_l_of_the_best():
    """Temperature 0, p = softmax(logits) = [0.5, 0.25, 0.15, 0.1]: guess 1 has p = 0.5 max p. It is kept at
    l = 0.3 and l = 0.5, rejected at l = 0.6 and l = 1 (then the next token is the argmax, 0)."""
    import onnxruntime as ort

    session = ort.InferenceSession(head_only_model().SerializeToString(), providers=["CPUExecutionProvider"])
    p = np.array([0.5, 0.25, 0.15, 0.1])
    logits = np.log(np.stack([p, p]))
    for lenience, kept in ((0.3, 1), (0.5, 1), (0.6, 0), (1.0, 0)):
        n, token = run_verify(session, logits, np.eye(4)[[1]], [1], [0.5, 0.5], 0.0, lenience=lenience)
        assert n == kept, lenience
        assert token == 0
        assert (n, token) == ref.verify(logits, np.eye(4)[[1]], [1], [0.5, 0.5], 0.0, lenience=lenience)[:2]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_logit_mask_bans_its_tokens_before_everything_else(head, temperature):
    """A -inf in logit_mask row i removes that token from p_i: zero probability, never the argmax, never drawn;
    the rest of the row is the reference on the masked logits. Verification with a banned guess rejects it."""
    rng = np.random.default_rng(31)
    logits = random_logits(rng, 3)
    mask = np.zeros_like(logits)
    banned = [int(np.argmax(row)) for row in logits]                  # the best token of every row
    mask[np.arange(3), banned] = -np.inf
    q = rng.dirichlet(np.ones(VOCAB), size=2).astype(np.float32)
    guesses = [banned[0], int(np.argsort(logits[1])[-2])]
    uniforms = np.array([0.0, 0.0, 0.5], np.float32)                # every guess the target allows is kept
    probs, n, token = run_head(head, logits, [3, *guesses], q, uniforms, temperature, mask=mask)
    want_n, want_token, detail = ref.verify(logits + mask, q, np.array(guesses), uniforms, temperature)
    np.testing.assert_allclose(probs, detail["p"], rtol=0, atol=1e-6)
    assert (n, token) == (want_n, want_token) and n == 0              # the banned first guess is rejected
    assert probs[np.arange(3), banned].max() == 0.0 and token != banned[0]


def test_the_head_reads_batch_row_0(head):
    """Beam search binds many rows: the head's verdict is the one for row 0 alone, whatever the other rows hold."""
    rng = np.random.default_rng(32)
    logits = random_logits(rng, 3)
    q = rng.dirichlet(np.ones(VOCAB), size=2).astype(np.float32)
    ids = [3, 5, 9]
    uniforms = rng.random(3).astype(np.float32)
    alone = run_head(head, logits, ids, q, uniforms, 1.0)
    batch = np.stack([logits, random_logits(rng, 3), random_logits(rng, 3)])
    many = run_head(head, logits, ids, q, uniforms, 1.0, batch_logits=batch,
                    batch_ids=np.array([ids, [4, 4, 4], [8, 1, 2]], np.int64))
    np.testing.assert_array_equal(alone[0], many[0])
    assert alone[1:] == many[1:]
