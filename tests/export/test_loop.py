"""A draft's proposal loop (export/loop.py) against an independent reference: PyTorch's forward over the growing
sequence for the logits, the NumPy sampler (numpy_sampler.py) for the q rows and the draws, with the same uniforms.
And the plain branch of the wrapped graph is the format-3 graph, output for output."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

import numpy_sampler as ref
from specdec.export import loop
from specdec.export.families import t5_decoder as decoder, t5_encoder as encoder
from specdec.export.head import plain_step_feed
from tinymodels import tiny_t5_model

pytestmark = [pytest.mark.filterwarnings("ignore:You are using the legacy TorchScript-based ONNX export"),
              pytest.mark.filterwarnings("ignore:The feature will be removed:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")]

VOCAB = 300          # wider than the head's 256 TopK candidates
SOURCE = np.array([[5, 9, 13, 200, 7, 1]], np.int64)
PREFIX = [0, 17, 42]                           # start token + 2 tokens: the first iteration reads 3 tokens
SETTINGS = {"greedy": (0.0, 0, 1.0), "T=1": (1.0, 0, 1.0), "top-k": (0.8, 5, 1.0), "top-p": (1.3, 0, 0.9)}


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    root = tmp_path_factory.mktemp("loop")
    model = tiny_t5_model(seed=4, vocab=VOCAB, d_model=32, heads=2, d_kv=8, layers=1, decoder_layers=2,
                          initializer_factor=2.0)
    encoder.export_encoder(model, root / "encoder.onnx")
    decoder.export_decoder(model, root / "plain.onnx")
    decoder.export_decoder(model, root / "loop.onnx")
    loop.add_proposal_loop_file(root / "loop.onnx")
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sessions = {name: ort.InferenceSession(str(root / f"{name}.onnx"), opts, providers=["CPUExecutionProvider"])
                for name in ("encoder", "plain", "loop")}
    return model, sessions


def feed(sessions, temperature, top_k, top_p, ids, past, uniforms, steps):
    cross = sessions["encoder"].run(None, {"input_ids": SOURCE})[0]
    f = {**plain_step_feed(VOCAB, temperature, session=sessions["loop"]), "input_ids": ids, "past_kv": past,
         "cross_kv": cross, "uniforms": uniforms, "top_k": np.array([top_k], np.int64),
         "top_p": np.array([top_p], np.float32), "steps": np.array([steps], np.int64)}
    return f


def torch_reference(model, temperature, top_k, top_p, uniforms, banned=()):
    """Tokens and q rows of len(uniforms) autoregressive sampling steps after PREFIX, from PyTorch's logits (the
    `banned` tokens' at -inf)."""
    seq, rows, tokens = list(PREFIX), [], []
    for u in uniforms:
        with torch.no_grad():
            logits = model(input_ids=torch.from_numpy(SOURCE),
                           decoder_input_ids=torch.tensor([seq])).logits[0, -1].double().numpy()
        logits[list(banned)] = -np.inf
        q = ref.standardize_row(logits, temperature, top_k, top_p)
        tok = ref.draw(q, u)
        rows.append(q)
        tokens.append(tok)
        seq.append(tok)
    return np.array(tokens), np.array(rows)


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("k", [2, 5])
def test_loop_tokens_and_q_rows_match_pytorch_and_numpy(graphs, setting, k):
    model, sessions = graphs
    temperature, top_k, top_p = SETTINGS[setting]
    agree = 0
    for seed in range(6):
        uniforms = np.random.default_rng(seed).random(k, dtype=np.float32)
        want_tokens, want_rows = torch_reference(model, temperature, top_k, top_p, uniforms)
        cross = sessions["encoder"].run(None, {"input_ids": SOURCE})[0]
        layers, _, _, heads, _, d_kv = cross.shape
        empty = np.zeros((0, layers, 2, 1, heads, d_kv), np.float32)
        logits, new_kv, probs, accepted, tokens = sessions["loop"].run(
            None, feed(sessions, temperature, top_k, top_p, np.array([PREFIX]), empty, uniforms, k))
        assert tokens.shape == (k,) and probs.shape == (k, VOCAB) and logits.shape == (1, 0, VOCAB)
        assert new_kv.shape[0] == len(PREFIX) + k - 1 and accepted.tolist() == [0]
        # a draw can flip at a boundary within float32 rounding: count agreement, and compare rows up to the
        # first difference
        same = int(np.argmax(tokens != want_tokens)) if (tokens != want_tokens).any() else k
        agree += same == k
        np.testing.assert_allclose(probs[:same + 1], want_rows[:same + 1], atol=2e-5)
    assert agree >= 5, f"the loop's draws differ from the reference's on {6 - agree} of 6 seeds"


def mask_row(model, count: int = 40) -> tuple[np.ndarray, list]:
    """A logit_mask row [1, V] banning the first step's 3 likeliest tokens and random others (so it changes the
    draws), and the banned ids."""
    with torch.no_grad():
        first = model(input_ids=torch.from_numpy(SOURCE), decoder_input_ids=torch.tensor([PREFIX])).logits[0, -1]
    banned = sorted(set(first.topk(3).indices.tolist()) |
                    set(np.random.default_rng(3).integers(2, VOCAB, count).tolist()))
    row = np.zeros((1, VOCAB), np.float32)
    row[0, banned] = -np.inf
    return row, banned


@pytest.mark.parametrize("setting", ["greedy", "T=1", "top-k"])
def test_one_mask_row_holds_at_every_step_of_the_loop(graphs, setting):
    """logit_mask [1, V] (Whisper's suppressed tokens, say) bans the same tokens at each of the k steps: tokens and
    q rows equal the reference's with those logits at -inf, and no banned token is drawn."""
    model, sessions = graphs
    temperature, top_k, top_p = SETTINGS[setting]
    row, banned = mask_row(model)
    k, agree = 5, 0
    for seed in range(6):
        uniforms = np.random.default_rng(seed).random(k, dtype=np.float32)
        want_tokens, want_rows = torch_reference(model, temperature, top_k, top_p, uniforms, banned)
        cross = sessions["encoder"].run(None, {"input_ids": SOURCE})[0]
        layers, _, _, heads, _, d_kv = cross.shape
        f = feed(sessions, temperature, top_k, top_p, np.array([PREFIX]),
                 np.zeros((0, layers, 2, 1, heads, d_kv), np.float32), uniforms, k)
        f["logit_mask"] = row
        _, _, probs, _, tokens = sessions["loop"].run(None, f)
        assert not set(tokens.tolist()) & set(banned)
        assert (probs[:, banned] == 0).all()
        same = int(np.argmax(tokens != want_tokens)) if (tokens != want_tokens).any() else k
        agree += same == k
        np.testing.assert_allclose(probs[:same + 1], want_rows[:same + 1], atol=2e-5)
    assert agree >= 5, f"the loop's draws differ from the reference's on {6 - agree} of 6 seeds"


@pytest.mark.parametrize("setting", ["greedy", "T=1"])
def test_loop_equals_single_steps_of_the_plain_graph(graphs, setting):
    """The loop gives what k single runs of the format-3 graph give with the same uniforms, cache included."""
    _, sessions = graphs
    temperature, top_k, top_p = SETTINGS[setting]
    k = 4
    uniforms = np.random.default_rng(7).random(k, dtype=np.float32)
    cross = sessions["encoder"].run(None, {"input_ids": SOURCE})[0]
    layers, _, _, heads, _, d_kv = cross.shape
    cache = np.zeros((0, layers, 2, 1, heads, d_kv), np.float32)
    ids, tokens, rows = np.array([PREFIX]), [], []
    for i in range(k):
        f = feed(sessions, temperature, top_k, top_p, ids, cache, uniforms[i:i + 1], 1)
        del f["steps"]
        _, new_kv, probs, _, token = sessions["plain"].run(None, f)
        cache = np.concatenate([cache, new_kv])
        tokens.append(int(token[0]))
        rows.append(probs[0])
        ids = token.reshape(1, 1)
    empty = cache[:0]
    cache = cache[:len(PREFIX) + k - 1]
    _, new_kv, probs, _, got = sessions["loop"].run(None, feed(sessions, temperature, top_k, top_p,
                                                               np.array([PREFIX]), empty, uniforms, k))
    assert got.tolist() == tokens
    np.testing.assert_allclose(probs, np.array(rows), atol=1e-5)
    np.testing.assert_allclose(new_kv, cache, rtol=1e-5, atol=1e-5)


def test_plain_branch_is_the_format3_graph(graphs):
    _, sessions = graphs
    cross = sessions["encoder"].run(None, {"input_ids": SOURCE})[0]
    layers, _, _, heads, _, d_kv = cross.shape
    past = np.random.default_rng(0).standard_normal((3, layers, 2, 1, heads, d_kv)).astype(np.float32)
    q = np.random.default_rng(1).dirichlet(np.ones(VOCAB), size=2).astype(np.float32)
    f = feed(sessions, 1.0, 0, 1.0, np.array([[4, 8, 15]]), past, np.array([0.3, 0.6, 0.2], np.float32), 1)
    f["draft_probs"] = q                       # a verify run over 2 guesses
    got = sessions["loop"].run(None, f)
    del f["steps"]
    want = sessions["plain"].run(None, f)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def verify_then_continue_reference(model, temperature, top_k, top_p, guesses, q, uniforms, k, banned=()):
    """A chain level's one run, from PyTorch's logits (the `banned` tokens' at -inf) and the NumPy sampler: verify
    `guesses` (after PREFIX) against q with uniforms[:G+1], keep n of them and the token z drawn, then sampling steps
    with uniforms[G+i] until k tokens; (tokens, rows, n)."""
    def logits_after(seq, count):
        with torch.no_grad():
            out = model(input_ids=torch.from_numpy(SOURCE),
                        decoder_input_ids=torch.tensor([seq])).logits[0, -count:].double().numpy()
        out[:, list(banned)] = -np.inf
        return out

    g = len(guesses)
    seq = list(PREFIX) + list(guesses)
    logits = logits_after(seq, g + 1)
    n, z, detail = ref.verify(logits, q, guesses, uniforms[:g + 1], temperature, top_k, top_p)
    tokens, rows = list(guesses[:n]) + [z], list(detail["p"][:n + 1])
    seq = list(PREFIX) + tokens
    i = 1
    while len(tokens) < k:
        row = ref.standardize_row(logits_after(seq, 1)[0], temperature, top_k, top_p)
        tok = ref.draw(row, uniforms[g + i])
        tokens.append(tok)
        rows.append(row)
        seq.append(tok)
        i += 1
    return np.array(tokens[:k]), np.array(rows[:k]), n


@pytest.mark.parametrize("setting", ["greedy", "T=1", "top-k"])
@pytest.mark.parametrize("g,k,masked", [(2, 4, False), (3, 3, False), (1, 5, False), (2, 4, True)],
                         ids=["2-4", "3-3", "1-5", "2-4-mask"])
def test_verify_then_continue_matches_pytorch_and_numpy(graphs, setting, g, k, masked):
    """A chain level in one run: iteration 0 verifies the level below's g guesses (the last g of input_ids) against
    their q rows, the loop continues to k tokens; the kept guesses' keys and values stay, the rejected ones' go,
    and the k-th token is drawn, not run (new_kv: unseen tokens - g + k - 1 positions). `masked`: one logit_mask
    row, which the verifying iteration's g + 1 rows and every later step get."""
    model, sessions = graphs
    temperature, top_k, top_p = SETTINGS[setting]
    row, banned = mask_row(model) if masked else (None, [])
    rng = np.random.default_rng(g * 10 + k)
    cross = sessions["encoder"].run(None, {"input_ids": SOURCE})[0]
    layers, _, _, heads, _, d_kv = cross.shape
    empty = np.zeros((0, layers, 2, 1, heads, d_kv), np.float32)
    agree, kept = 0, set()
    for seed in range(8):
        # guesses from a "level below": half the time the model's own greedy choice (so some are kept), q rows
        # random distributions holding the guess
        q = rng.dirichlet(np.ones(VOCAB) * 0.05, size=g).astype(np.float32)
        guesses = [int(rng.integers(2, VOCAB)) for _ in range(g)]
        seq = list(PREFIX)
        for j in range(g):
            if seed % 2 == 0:
                with torch.no_grad():
                    logits = model(input_ids=torch.from_numpy(SOURCE), decoder_input_ids=torch.tensor([seq])).logits
                logits[0, -1, banned] = -np.inf
                guesses[j] = int(logits[0, -1].argmax())
            seq.append(guesses[j])
            q[j, guesses[j]] += 0.5
            q[j] /= q[j].sum()
        uniforms = rng.random(g + k, dtype=np.float32)
        want_tokens, want_rows, want_n = verify_then_continue_reference(model, temperature, top_k, top_p, guesses,
                                                                         q, uniforms, k, banned)
        f = feed(sessions, temperature, top_k, top_p, np.array([PREFIX + guesses]), empty, uniforms, k)
        f["draft_probs"] = q
        if masked:
            f["logit_mask"] = row
        logits, new_kv, probs, accepted, tokens = sessions["loop"].run(None, f)
        assert tokens.shape == (k,) and probs.shape == (k, VOCAB) and logits.shape == (1, 0, VOCAB)
        assert new_kv.shape[0] == len(PREFIX) + k - 1
        kept.add(int(accepted[0]))
        if int(accepted[0]) != want_n:
            continue                 # a boundary case within float32 rounding: counted below
        same = int(np.argmax(tokens != want_tokens)) if (tokens != want_tokens).any() else k
        agree += same == k
        np.testing.assert_allclose(probs[:same + 1], want_rows[:same + 1], atol=2e-5)
        # the cache: PyTorch-independent check against the plain graph run over the k-1 tokens kept
        plain = feed(sessions, temperature, top_k, top_p, np.array([PREFIX + tokens[:k - 1].tolist()]), empty,
                     uniforms[:1], 1)
        del plain["steps"]
        want_kv = sessions["plain"].run(None, plain)[1]
        np.testing.assert_allclose(new_kv, want_kv, rtol=1e-4, atol=1e-4)
    assert agree >= 7, f"the loop's tokens differ from the reference's on {8 - agree} of 8 seeds"
    if setting == "greedy":
        assert len(kept) > 1, "the guesses must sometimes be kept and sometimes not"
