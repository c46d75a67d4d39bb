"""The speculative head (export/head.py) against the NumPy reference in numpy_sampler.py: the head alone
(head_only_model, the very nodes every exported decoder carries) for the math, at batch 1 and on batches whose rows
each have their own parameters, guesses and guess counts."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import numpy_sampler as ref
from specdec.export.head import CANDIDATES, GUESS_COUNTS, INPUTS, OUTPUTS, head_only_model

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
             mask=None):
    """Batch 1 -> (probs [G+1, V], n, next token). `mask`: the logit_mask rows (none: [0, V])."""
    logits = np.asarray(logits, np.float32)
    vocab = logits.shape[-1]
    probs, accepted, next_token = session.run(list(OUTPUTS), {
        "logits": logits[None], "input_ids": np.asarray(input_ids, np.int64)[None],
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


# --- batches: every row with its own parameters, guesses and guess count ------------------------------------------

def run_batch(session, logits, guesses, draft_probs, uniforms, temperature, top_k, top_p, lenience, counts=None,
              mask=None, before=2, seed=0):
    """logits [B, G+1, V]: the last G+1 positions of each row, guesses [B, G]; `before` positions of noise (logits
    and tokens the head must not read) come first. The parameters are fed as given ([1] or [B]), counts (guess_counts)
    only when not None. -> (probs [B, G+1, V], accepted [B], next_token [B])."""
    logits = np.asarray(logits, np.float32)
    rows, positions, vocab = logits.shape
    rng = np.random.default_rng(seed)
    feed = {"logits": np.concatenate([random_logits(rng, rows * before, vocab).reshape(rows, before, vocab), logits],
                                     axis=1),
            "input_ids": np.concatenate([rng.integers(0, vocab, (rows, before + 1)),
                                         np.asarray(guesses, np.int64).reshape(rows, -1)], axis=1).astype(np.int64),
            "draft_probs": np.asarray(draft_probs, np.float32), "uniforms": np.asarray(uniforms, np.float32),
            "temperature": np.asarray(temperature, np.float32).reshape(-1),
            "top_k": np.asarray(top_k, np.int64).reshape(-1), "top_p": np.asarray(top_p, np.float32).reshape(-1),
            "lenience": np.asarray(lenience, np.float32).reshape(-1),
            "logit_mask": np.zeros((0, vocab), np.float32) if mask is None else np.asarray(mask, np.float32)}
    if counts is not None:
        feed[GUESS_COUNTS] = np.asarray(counts, np.int64).reshape(-1)
    probs, accepted, next_token = session.run(list(OUTPUTS), feed)
    assert probs.shape == (rows * positions, vocab) and accepted.shape == next_token.shape == (rows,)
    return probs.reshape(rows, positions, vocab), accepted, next_token


def test_guess_counts_is_an_optional_input(head):
    """guess_counts is an overridable initializer of value [-1]: a caller that knows nothing of it runs as before;
    fed or bound ([1] or [B]) it caps each row's guesses."""
    assert [i.name for i in head.get_overridable_initializers()] == [GUESS_COUNTS]
    model = head_only_model()
    init = next(i for i in model.graph.initializer if i.name == GUESS_COUNTS)
    assert list(init.dims) == [1] and list(init.int64_data) == [-1]
    assert GUESS_COUNTS in [i.name for i in model.graph.input]
    rng = np.random.default_rng(5)
    gamma, rows = 3, 2
    logits = random_logits(rng, rows * (gamma + 1)).reshape(rows, gamma + 1, VOCAB)
    guesses = logits[:, :gamma].argmax(-1)                       # greedy: every guess kept
    args = (logits, guesses, np.zeros((gamma, VOCAB)), np.zeros(gamma + 1), [0.0], [0], [1.0], [1.0])
    assert run_batch(head, *args)[1].tolist() == [3, 3]
    assert run_batch(head, *args, counts=[-1])[1].tolist() == [3, 3]
    assert run_batch(head, *args, counts=[2])[1].tolist() == [2, 2]
    assert run_batch(head, *args, counts=[0, 3])[1].tolist() == [0, 3]
    # IO binding (as the runtime binds): an OrtValue for guess_counts, or none
    import onnxruntime as ort

    for counts, want in ((None, [3, 3]), (np.array([1, 0], np.int64), [1, 0])):
        binding = head.io_binding()
        feed = {"logits": logits, "input_ids": np.concatenate([np.full((rows, 1), 3), guesses], 1),
                "draft_probs": np.zeros((gamma, VOCAB), np.float32), "uniforms": np.zeros(gamma + 1, np.float32),
                **scalars(0.0, 0, 1.0), "logit_mask": np.zeros((0, VOCAB), np.float32)}
        if counts is not None:
            feed[GUESS_COUNTS] = counts
        for name, value in feed.items():
            binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(value)))
        for name in OUTPUTS:
            binding.bind_output(name)
        head.run_with_iobinding(binding)
        assert binding.get_outputs()[1].numpy().tolist() == want


def test_each_batch_row_is_its_own_run(head):
    """Rows sharing draft_probs, uniforms and parameters: each row's probs, n and token are those of the row alone."""
    rng = np.random.default_rng(32)
    gamma, rows = 2, 3
    logits = random_logits(rng, rows * (gamma + 1)).reshape(rows, gamma + 1, VOCAB)
    q = rng.dirichlet(np.ones(VOCAB), size=gamma).astype(np.float32)
    guesses = np.array([[5, 9], [4, 4], [1, 2]])
    uniforms = rng.random(gamma + 1).astype(np.float32)
    for temperature in (1.0, 0.0):
        probs, accepted, tokens = run_batch(head, logits, guesses, q, uniforms, [temperature], [0], [1.0], [1.0])
        for b in range(rows):
            alone = run_head(head, logits[b], [3, *guesses[b]], q, uniforms, temperature)
            np.testing.assert_array_equal(probs[b], alone[0])
            assert (accepted[b], tokens[b]) == alone[1:]


# each row: temperature, top_k, top_p, lenience, guess count (None: G, negative: G + count)
MIXED_ROWS = [
    (0.0, 0, 1.0, 1.0, None),        # greedy
    (1.0, 5, 1.0, 1.0, 2),           # top-k, 2 of the G guesses
    (0.8, 0, 1.0, 1.0, 0),           # unfiltered (in a filtered batch), no guesses: a plain draw from p_1
    (0.0, 10, 0.9, 0.5, None),       # greedy, lenient, filtered
    (1.3, 0, 0.8, 0.7, -1),          # top-p, lenient, G - 1 guesses
    (1.0, 0, 1.0, 1.0, None),        # unfiltered, all G guesses
]
WIDE_ROWS = MIXED_ROWS[:4] + [
    (3.0, 0, 0.98, 1.0, None),       # a nucleus beyond the candidates: the batch takes the full sort
    (1.0, CANDIDATES + 30, 1.0, 0.8, -2),   # top-k beyond the candidates
]


def mixed_case(rng, settings, gamma, vocab, shared):
    """A batch with the rows' settings: target logits [B, G+1, V], per-row q (a noisy copy of the target under the
    row's own parameters; sampling rows' guesses drawn from it, greedy rows' guesses the argmax in some trials), per-row
    or shared (`shared`) q and uniforms, and logit masks banning a few tokens of some rows."""
    rows = len(settings)
    t, k, p, l, counts = (np.array(c) for c in zip(*[(s[0], s[1], s[2], s[3], gamma if s[4] is None else
                                                      s[4] % (gamma + 1) if s[4] >= 0 else gamma + s[4])
                                                     for s in settings]))
    logits = random_logits(rng, rows * (gamma + 1), vocab).reshape(rows, gamma + 1, vocab)
    q = np.zeros((rows, gamma, vocab), np.float32)
    guesses = np.zeros((rows, gamma), np.int64)
    for b in range(rows):
        draft = logits[b, :gamma] + random_logits(rng, gamma, vocab, scale=1.5)
        q[b] = ref.standardize(draft, t[b] if t[b] > 0 else 1.0, k[b], p[b])
        guesses[b] = [ref.draw(row, u) for row, u in zip(q[b], rng.random(gamma))]
        if t[b] <= 0 and rng.random() < 0.6:
            kept = rng.integers(0, gamma + 1)
            guesses[b, :kept] = logits[b, :kept].argmax(-1)
    uniforms = rng.random((rows, gamma + 1)).astype(np.float32)
    if shared:
        q, uniforms = q[0], uniforms[0]
    mask = np.zeros((rows * (gamma + 1), vocab), np.float32)
    banned = rng.random(mask.shape) < 3 / vocab
    banned[rows * (gamma + 1) // 2:] = False                    # the later rows have none
    mask[banned] = -np.inf
    return logits, q, guesses, uniforms, (t, k, p, l), counts, mask


@pytest.mark.parametrize("vocab", [VOCAB, WIDE])
@pytest.mark.parametrize("shared", [False, True], ids=["per-row-q", "shared-q"])
@pytest.mark.parametrize("masked", [False, True], ids=["no-mask", "mask"])
def test_batch_rows_match_the_reference_and_batch_1(head, vocab, shared, masked):
    """Greedy and sampling rows, filtered and unfiltered, lenient or not, with 0 .. G real guesses, in one batch:
    each row's probs, n and token are the NumPy reference on that row alone, and the head run at batch 1 on that row
    (its G_b guesses; and all G columns with guess_counts = [G_b])."""
    settings = MIXED_ROWS if vocab == VOCAB else WIDE_ROWS
    gamma = 4
    rng = np.random.default_rng(seed_of(vocab, shared, masked))
    seen = set()
    for trial in range(10 if vocab == VOCAB else 4):
        logits, q, guesses, uniforms, (t, k, p, l), counts, mask = mixed_case(rng, settings, gamma, vocab, shared)
        mask = mask if masked else None
        probs, accepted, tokens = run_batch(head, logits, guesses, q, uniforms, t, k, p, l, counts, mask,
                                            seed=trial)
        want = ref.verify_batch(logits, q, guesses, uniforms, t, k, p, l, counts, mask)
        for b, (want_probs, want_n, want_token, detail) in enumerate(want):
            g = counts[b]
            np.testing.assert_allclose(probs[b], want_probs, rtol=0, atol=1e-6, err_msg=f"row {b}")
            assert (accepted[b], tokens[b]) == (want_n, want_token), (trial, b)
            assert detail["dist"][tokens[b]] > 0
            if g:
                seen.add((bool(t[b] > 0), "kept all" if want_n == g else "rejected"))
            # the row alone at batch 1: its G_b guesses (N = G_b + 1), its uniforms r_1 .. r_{G_b} and the last
            q_b = q if shared else q[b]
            u_b = uniforms if shared else uniforms[b]
            rows_mask = None if mask is None else mask[b * (gamma + 1):(b + 1) * (gamma + 1)]
            alone = run_head(head, logits[b, :g + 1], [3, *guesses[b, :g]], q_b[:g], [*u_b[:g], u_b[gamma]], t[b],
                             k[b], p[b], l[b], None if rows_mask is None else rows_mask[:g + 1])
            np.testing.assert_allclose(probs[b, :g + 1], alone[0], rtol=0, atol=1e-7)
            assert (accepted[b], tokens[b]) == alone[1:], (trial, b)
            # ... and with all G columns and guess_counts [G_b]
            one = run_batch(head, logits[b:b + 1], guesses[b:b + 1], q_b if shared else q_b[None], u_b, t[b], k[b],
                            p[b], l[b], [g], rows_mask, seed=trial)
            np.testing.assert_allclose(probs[b], one[0][0], rtol=0, atol=1e-7)
            assert (accepted[b], tokens[b]) == (one[1][0], one[2][0])
    assert {(True, "rejected"), (False, "rejected")} <= seen and len(seen) >= 3, seen


def test_guess_counts_stop_at_the_count_and_draw_from_p(head):
    """Rows whose G columns would all be kept (greedy: the argmax; sampling: r = 0 on a token of p/q >= 1), with
    guess_counts G_b < G: n = G_b, and the next token is drawn from p_{G_b+1} itself, not from a residual (the
    uniforms are chosen so that the two draws differ)."""
    rng = np.random.default_rng(21)
    gamma, stop = 5, 2
    for temperature in (1.0, 0.7, 0.0):
        found = 0
        for trial in range(12):
            logits = random_logits(rng, gamma + 1)
            p = ref.standardize(logits, temperature)
            q = rng.dirichlet(np.ones(VOCAB), size=gamma).astype(np.float32)
            if temperature > 0:
                guesses = [int(np.argmax(p[i] / q[i])) for i in range(gamma)]      # p/q >= 1: kept at any r
            else:
                guesses = [int(np.argmax(row)) for row in p[:gamma]]
            residual = np.maximum(0.0, p[stop] - q[stop])
            u_last = next(u for u in rng.random(200) if temperature == 0 or
                          ref.draw(p[stop], u) != ref.draw(residual / residual.sum(), u))
            uniforms = np.array([0.0] * gamma + [u_last], np.float32)
            args = (logits[None], [guesses], q[None], uniforms[None], [temperature], [0], [1.0], [1.0])
            probs, n, token = run_batch(head, *args, counts=[stop])
            assert n[0] == stop and token[0] == ref.draw(p[stop], u_last)
            assert run_batch(head, *args)[1][0] == gamma                       # not capped: all G kept
            want = ref.verify_batch(logits[None], q, [guesses], uniforms, temperature, 0, 1.0, 1.0, [stop])[0]
            assert (n[0], token[0]) == want[1:3]
            if temperature > 0:
                found += token[0] != ref.draw(residual / residual.sum(), u_last)
            else:
                assert token[0] == int(np.argmax(logits[stop]))
        assert temperature == 0 or found == 12


def test_broken_control_differs_from_the_reference_per_row(head, broken_head):
    """A batch of sampling rows, each with a forced rejection (at a different guess, with its own parameters): the
    head follows the residual in every row, the deliberately broken head (residual=False) draws from p instead, and
    the uniforms make the two differ in every row."""
    rng = np.random.default_rng(44)
    gamma = 4
    settings = [(1.0, 0, 1.0, 1.0, 0), (0.8, 0, 1.0, 0.6, 2), (1.0, 6, 0.9, 1.0, 1), (1.2, 0, 1.0, 1.0, 3)]
    logits, q, guesses, uniforms = [], [], [], []
    for temperature, top_k, top_p, lenience, reject_at in settings:
        while True:
            target_logits, q_b, tokens, u = forced_case(rng, gamma, reject_at, temperature, top_k, top_p, lenience)
            p = ref.standardize(target_logits, temperature, top_k, top_p)
            residual = np.maximum(0.0, p[reject_at] - lenience * q_b[reject_at])
            differing = [x for x in rng.random(50) if ref.draw(p[reject_at], x) != ref.draw(residual, x)]
            if differing:
                u[gamma] = differing[0]
                break
        logits.append(target_logits), q.append(q_b), guesses.append(tokens), uniforms.append(u)
    logits, q, guesses, uniforms = np.stack(logits), np.stack(q), np.stack(guesses), np.stack(uniforms)
    t, k, p, l = (np.array([s[i] for s in settings]) for i in range(4))
    want = ref.verify_batch(logits, q, guesses, uniforms, t, k, p, l)
    _, n, tokens = run_batch(head, logits, guesses, q, uniforms, t, k, p, l)
    _, broken_n, broken_tokens = run_batch(broken_head, logits, guesses, q, uniforms, t, k, p, l)
    for b, (want_probs, want_n, want_token, _) in enumerate(want):
        assert want_n == settings[b][4] and (n[b], tokens[b]) == (want_n, want_token)
        assert broken_n[b] == want_n and broken_tokens[b] == ref.draw(want_probs[want_n], uniforms[b, gamma])
        assert broken_tokens[b] != want_token, b


def full_sort_nodes(graph) -> set:
    """Names of the nodes of the filter's full-sort fallback: the else branch (with a TopK) of an If whose then
    branch is one Identity."""
    names = set()

    def walk(g, inside: bool):
        for node in g.node:
            if inside:
                names.add(node.name)
            branches = {a.name: a.g for a in node.attribute if a.type == a.GRAPH}
            if node.op_type == "If":
                then, other = branches["then_branch"], branches["else_branch"]
                fallback = [n.op_type for n in then.node if n.op_type != "Constant"] == ["Identity"] and \
                    any(n.op_type == "TopK" for n in other.node)
                walk(then, inside)
                walk(other, inside or fallback)
            else:
                for sub in branches.values():
                    walk(sub, inside)

    walk(graph, False)
    return names


def test_an_unfiltered_row_does_not_force_the_full_sort():
    """A filtered row whose cutoff lies among the candidates next to an unfiltered row (top_k = 0, top_p = 1): no
    node of the full-sort fallback runs, and the unfiltered row comes out unfiltered. A row whose nucleus needs more
    than the candidates does run it (the check can fail)."""
    import json
    import os

    import onnxruntime as ort

    model = head_only_model()
    fallback = full_sort_nodes(model.graph)
    assert len(fallback) > 10
    rng = np.random.default_rng(8)
    logits = random_logits(rng, 2, WIDE).reshape(2, 1, WIDE)
    ran = {}
    for second in ((0, 1.0, 1.0), (0, 0.98, 3.0)):             # (top_k, top_p, temperature) of row 1
        opts = ort.SessionOptions()
        opts.enable_profiling = True
        opts.log_severity_level = 3
        session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        t, k, p = [1.0, second[2]], [40, second[0]], [1.0, second[1]]
        probs, _, tokens = run_batch(session, logits, np.zeros((2, 0)), np.zeros((0, WIDE)), [0.3], t, k, p, [1.0])
        trace = session.end_profiling()
        with open(trace) as f:
            events = json.load(f)
        os.remove(trace)
        ran[second] = {e["name"][:-len("_kernel_time")] for e in events
                       if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")} & fallback
        want = ref.verify_batch(logits, np.zeros((0, WIDE)), np.zeros((2, 0)), [0.3], t, k, p, 1.0)
        for b in range(2):
            np.testing.assert_allclose(probs[b], want[b][0], rtol=0, atol=1e-6)
            assert tokens[b] == want[b][2]
        assert np.count_nonzero(probs[0]) == 40
        if second[1] >= 1.0:
            assert np.count_nonzero(probs[1]) == WIDE          # unfiltered
    assert not ran[(0, 1.0, 1.0)], "an unfiltered row made the batch take the full sort"
    assert ran[(0, 0.98, 3.0)], "the nucleus beyond the candidates should take the full sort"


@pytest.mark.parametrize("third", [None, 1.0], ids=["all-greedy", "mixed"])
def test_a_strict_greedy_row_next_to_a_lenient_one_stays_strict(head, third):
    """Greedy row 1 (l = 1) guesses a token tied with its argmax but not the argmax: rejected, even while row 0's
    lenience < 1 makes the batch run the lenient test (which at l = 1 alone would keep a tie). A third, sampling
    row makes the batch mixed."""
    logits = np.log(np.array([[[0.4, 0.4, 0.2], [0.3, 0.3, 0.4]]] * 2, np.float32))
    guesses = [[1], [1]]
    t, l = [0.0, 0.0], [0.5, 1.0]
    if third is not None:
        logits, guesses, t, l = np.concatenate([logits, logits[:1]]), guesses + [[0]], t + [third], l + [1.0]
    q = np.full((1, 3), 1 / 3, np.float32)
    _, n, tokens = run_batch(head, logits, guesses, q, [0.5, 0.5], t, [0], [1.0], l)
    want = ref.verify_batch(logits, q, guesses, [0.5, 0.5], t, 0, 1.0, l)
    assert n[:2].tolist() == [1, 0] and [w[1] for w in want] == n.tolist()
    assert tokens.tolist() == [w[2] for w in want]


@pytest.mark.parametrize("guesses", [0, 1, 3])
def test_the_leading_kept_count_never_sums_over_an_empty_axis(guesses):
    """The count of leading kept guesses reduces a [B, G + 1] axis, so that a one-token step (G = 0) reduces over a
    non-empty axis: onnxruntime before 1.32 (onnxruntime-gpu 1.31.1 included) keeps an empty reduced axis at 0, and
    the head's `accepted` then failed to squeeze on every plain step. The reduction's input is read back here; the
    count is checked against a direct one."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from specdec.export.head import Nodes, _leading_kept

    g = Nodes("t/")
    n = _leading_kept(g, "rejected", "counts")
    summed = [node.input[0] for node in g.nodes if node.op_type.startswith(("Reduce", "ArgM"))]
    assert len(summed) == 1
    inputs = [helper.make_tensor_value_info("rejected", TensorProto.BOOL, [1, None]),
              helper.make_tensor_value_info("counts", TensorProto.INT64, [1, 1])]
    inferred = onnx.shape_inference.infer_shapes(helper.make_model(
        helper.make_graph(g.nodes, "kept", inputs, [helper.make_tensor_value_info(n, TensorProto.INT64, None)]),
        opset_imports=[helper.make_opsetid("", 17)]))
    reduced_type = next(v for v in inferred.graph.value_info if v.name == summed[0])      # whatever dtype it has
    graph = helper.make_graph(g.nodes, "kept", inputs, [helper.make_tensor_value_info(n, TensorProto.INT64, None),
                                                        reduced_type])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(guesses)
    for _ in range(8):
        rejected = rng.random((1, guesses)) < 0.4
        count, reduced = session.run(None, {"rejected": rejected, "counts": np.array([[guesses]], np.int64)})
        assert reduced.shape == (1, guesses + 1)
        expected = int(np.argmax(rejected[0])) if rejected.any() else guesses
        assert count.tolist() == [[expected]]
