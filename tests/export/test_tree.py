"""Token-tree verification in the target's decoder graph (export format 6): t5_decoder.py's tree_depth and
tree_mask, export/head.py's tree_uniforms -> draws.

A tree run gives every node the logits and K/V of a chain run over its path root..node (ONNX Runtime, and PyTorch:
Hugging Face's T5 on the whole sequence, DecoderWithCache for the K/V); the chain defaults (arange, lower triangle)
give a draft-style graph's outputs bit for bit; draws are the NumPy reference sampler's draws from each row; the
zero-size tree_uniforms / draws of a chain run bind through the runtime's Binder; drafts have no tree inputs, and
an export of an older format is refused with the one-line re-export error.

Tolerances (fp32): a tree run against chain runs of the same graph 1e-5 (the same values summed over other masked
keys; 1e-7 seen); against PyTorch 1e-4 in a logit (tests/export/test_parity.py's) and 1e-5 in K/V."""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

import numpy_sampler as ref
from specdec.export.families import t5_decoder as decoder, t5_encoder as encoder
from specdec.export.head import CANDIDATES, chain_tree_feed, head_only_model, plain_step_feed
from specdec.runtime.core.graph_io import TREE_INPUTS, TREE_OUTPUTS
from tinymodels import tiny_t5_model

pytestmark = [pytest.mark.filterwarnings("ignore:You are using the legacy TorchScript-based ONNX export"),
              pytest.mark.filterwarnings("ignore:The feature will be removed:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")]

VOCAB = 48
SOURCE = np.array([[5, 9, 13, 20, 7, 11, 30, 1]], np.int64)
PASTS = (0, 3, 21)          # 21 + depth > max_distance 16: the bias table's last row
TREE_TOL, TORCH_LOGITS_TOL, TORCH_KV_TOL = 1e-5, 1e-4, 1e-5


def session(path):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    """A tiny target (small buckets, scaled position bias: a position error shows) exported twice: with the tree
    inputs (as specdec-export writes a target) and without (as a draft's graph, format 5's target)."""
    root = tmp_path_factory.mktemp("tree")
    model = tiny_t5_model(seed=5, bias_scale=4.0, vocab=VOCAB, d_model=32, d_kv=8, heads=3, layers=2,
                          decoder_layers=2, relative_attention_num_buckets=8, relative_attention_max_distance=16)
    encoder.export_encoder(model, root / "encoder.onnx")
    decoder.export_decoder(model, root / "tree.onnx", tree=True)
    decoder.export_decoder(model, root / "chain.onnx")
    sessions = {name: session(root / f"{name}.onnx") for name in ("encoder", "tree", "chain")}
    cross = sessions["encoder"].run(None, {"input_ids": SOURCE})[0]
    return model, sessions, cross, root


def random_tree(rng, n: int, shuffle: bool):
    """parent[i] < i (node 0 the root, depth 0); slot[i]: where node i sits in the run (any order when shuffled).
    -> parent, slot, tree_depth [n] and tree_mask [n, n] in slot order."""
    parent = [-1] + [int(rng.integers(0, i)) for i in range(1, n)]
    depth = [0] * n
    for i in range(1, n):
        depth[i] = depth[parent[i]] + 1
    slot = rng.permutation(n) if shuffle else np.arange(n)
    tree_depth = np.zeros(n, np.int64)
    tree_mask = np.zeros((n, n), np.bool_)
    for i in range(n):
        tree_depth[slot[i]] = depth[i]
        j = i
        while j >= 0:                       # i itself and its ancestors
            tree_mask[slot[i], slot[j]] = True
            j = parent[j]
    return parent, slot, tree_depth, tree_mask


def path_of(parent, i: int) -> list:
    path = []
    while i >= 0:
        path.append(i)
        i = parent[i]
    return path[::-1]


def run(sess, ids, cache, cross, tree=None, **head):
    """logits, new_kv, probs, accepted, next_token (, draws) of one run; `tree`: (tree_depth, tree_mask) or a chain."""
    n = ids.shape[1]
    feed = {**plain_step_feed(VOCAB, session=sess, new=n), "input_ids": ids, "past_kv": cache, "cross_kv": cross,
            **head}
    if tree is not None:
        feed["tree_depth"], feed["tree_mask"] = tree
    return sess.run(None, feed)


def prefill(sess, cross, past: int, rng):
    """The cache after `past` decoder tokens (start token first), made by a chain run."""
    prefix = np.concatenate([[0], rng.integers(3, VOCAB, max(past - 1, 0))])[:past].astype(np.int64)
    layers, _, _, heads, _, d_kv = cross.shape
    empty = np.zeros((0, layers, 2, 1, heads, d_kv), np.float32)
    if past == 0:
        return prefix, empty
    return prefix, run(sess, prefix[None], empty, cross)[1]


@pytest.mark.parametrize("past", PASTS)
def test_each_node_of_a_tree_run_is_a_chain_run_over_its_path(graphs, past):
    """Random trees of 1..8 nodes (random parents, slots shuffled in every other tree): every node's logits row and
    new_kv row equal ONNX Runtime's chain run over its path with the same past, Hugging Face's forward over
    prefix + path (logits) and DecoderWithCache's chain over prefix + path (K/V); the PyTorch module in tree mode
    gives the tree run's logits."""
    model, sessions, cross, _ = graphs
    tree_sess = sessions["tree"]
    rng = np.random.default_rng(100 + past)
    prefix, cache = prefill(tree_sess, cross, past, rng)
    torch_module = decoder.DecoderWithCache(model).eval()
    torch_tree = decoder.DecoderWithCache(model, tree=True).eval()
    empty = torch.zeros((0, *cache.shape[1:]))
    worst = {"chain": 0.0, "hf": 0.0, "kv": 0.0}
    for trial, n in enumerate([1, 2, 3, 5, 8, 8, 6, 4]):
        parent, slot, tree_depth, tree_mask = random_tree(rng, n, shuffle=trial % 2 == 1)
        tokens = rng.integers(3, VOCAB, n)
        ids = np.zeros((1, n), np.int64)
        ids[0, slot] = tokens
        logits, new_kv = run(tree_sess, ids, cache, cross, (tree_depth, tree_mask))[:2]
        assert logits.shape == (1, n, VOCAB) and new_kv.shape == (n, *cache.shape[1:])
        with torch.no_grad():
            module_logits = torch_tree(torch.from_numpy(ids), torch.from_numpy(cache), torch.from_numpy(cross),
                                       tree_depth=torch.from_numpy(tree_depth),
                                       tree_mask=torch.from_numpy(tree_mask))[0].numpy()
        np.testing.assert_allclose(module_logits, logits, rtol=0, atol=TREE_TOL)
        for i in range(n):
            path = tokens[path_of(parent, i)]
            chain_logits, chain_kv = run(tree_sess, path[None], cache, cross)[:2]
            got_logits, got_kv = logits[0, slot[i]], new_kv[slot[i]]
            np.testing.assert_allclose(got_logits, chain_logits[0, -1], rtol=0, atol=TREE_TOL)
            np.testing.assert_allclose(got_kv, chain_kv[-1], rtol=0, atol=TREE_TOL)
            sequence = torch.from_numpy(np.concatenate([prefix, path])[None])
            with torch.no_grad():
                hf = model(input_ids=torch.from_numpy(SOURCE), decoder_input_ids=sequence).logits[0, -1].numpy()
                kv = torch_module(sequence, empty, torch.from_numpy(cross))[1][-1].numpy()
            np.testing.assert_allclose(got_logits, hf, rtol=0, atol=TORCH_LOGITS_TOL)
            np.testing.assert_allclose(got_kv, kv, rtol=0, atol=TORCH_KV_TOL)
            worst["chain"] = max(worst["chain"], float(np.abs(got_logits - chain_logits[0, -1]).max()))
            worst["hf"] = max(worst["hf"], float(np.abs(got_logits - hf).max()))
            worst["kv"] = max(worst["kv"], float(np.abs(got_kv - kv).max()))
    print(f"past {past}: max |diff| vs chain runs {worst['chain']:.1e}, vs HF logits {worst['hf']:.1e}, "
          f"vs PyTorch K/V {worst['kv']:.1e}")


def test_a_chain_is_a_draft_style_run_bit_for_bit(graphs):
    """tree_depth = arange(N), tree_mask = the lower triangle: every output the two graphs share is identical to
    the graph without tree inputs (a draft's, and format 5's target), plain steps and verify runs, T = 0 and T = 1;
    draws is empty."""
    _, sessions, cross, _ = graphs
    rng = np.random.default_rng(7)
    for past in (0, 21):
        _, cache = prefill(sessions["chain"], cross, past, rng)
        for n, temperature in ((1, 0.0), (4, 1.0), (9, 1.0), (9, 0.0)):
            ids = rng.integers(3, VOCAB, (1, n))
            q = rng.random((n - 1, VOCAB)).astype(np.float32)
            head = {"draft_probs": q / q.sum(-1, keepdims=True), "uniforms": rng.random(n, dtype=np.float32),
                    "temperature": np.array([temperature], np.float32)}
            want = run(sessions["chain"], ids, cache, cross, **head)
            got = run(sessions["tree"], ids, cache, cross, **head)
            assert len(got) == len(want) + 1 and got[-1].shape == (0,) and got[-1].dtype == np.int64
            for name, a, b in zip(("logits", "new_kv", "probs", "accepted", "next_token"), got, want):
                assert np.array_equal(a, b), (past, n, temperature, name)


def test_an_int8_target_verifies_a_tree_like_its_chains(graphs, tmp_path):
    """The int8 quantization of a target (export/quantize.py: one activation scale per token) keeps a tree node's
    logits and K/V those of a chain run over its path (1e-4; 6e-6 seen)."""
    from specdec.export.quantize import quantize_int8, target_float_nodes

    _, sessions, cross, root = graphs
    path = tmp_path / "int8.onnx"
    shutil.copy(root / "tree.onnx", path)
    quantize_int8(path, "target decoder", target_float_nodes(path, VOCAB, 2))
    sess = session(path)
    assert any(node.op_type == "MatMulInteger" for node in onnx.load(str(path)).graph.node)
    rng = np.random.default_rng(9)
    _, cache = prefill(sess, cross, 4, rng)
    parent, slot, tree_depth, tree_mask = random_tree(rng, 7, shuffle=True)
    tokens = rng.integers(3, VOCAB, 7)
    ids = np.zeros((1, 7), np.int64)
    ids[0, slot] = tokens
    logits, new_kv = run(sess, ids, cache, cross, (tree_depth, tree_mask))[:2]
    for i in range(7):
        chain_logits, chain_kv = run(sess, tokens[path_of(parent, i)][None], cache, cross)[:2]
        np.testing.assert_allclose(logits[0, slot[i]], chain_logits[0, -1], rtol=0, atol=1e-4)
        np.testing.assert_allclose(new_kv[slot[i]], chain_kv[-1], rtol=0, atol=1e-4)


SETTINGS = {"T=0": (0.0, 0, 1.0), "T=1": (1.0, 0, 1.0), "top-k": (0.8, 5, 1.0), "top-p": (1.3, 0, 0.9),
            "top-k past the candidates": (1.0, CANDIDATES + 40, 0.95)}


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("vocab", [50, CANDIDATES + 344])
def test_draws_are_the_reference_samplers_draws_of_each_row(setting, vocab):
    """The target's head alone (head_only_model(tree=True)): N rows, G = N - 1 zero q rows (how the runtime binds a
    tree), tree_uniforms [N]: probs are the reference's standardized rows and draws its inverse-CDF draws with the
    same uniforms (at T = 0 each row's argmax)."""
    temperature, top_k, top_p = SETTINGS[setting]
    head = session_of(head_only_model(tree=True))
    rng = np.random.default_rng(vocab + len(setting))
    for n in (1, 3, 7):
        logits = (rng.standard_normal((n, vocab)) * 3).astype(np.float32)
        uniforms = rng.random(n, dtype=np.float32)
        probs, _, _, draws = head.run(None, {
            "input_ids": rng.integers(3, vocab, (1, n)), "logits": logits[None],
            "draft_probs": np.zeros((n - 1, vocab), np.float32), "uniforms": rng.random(n, dtype=np.float32),
            "temperature": np.array([temperature], np.float32), "top_k": np.array([top_k], np.int64),
            "top_p": np.array([top_p], np.float32), "lenience": np.ones(1, np.float32),
            "logit_mask": np.zeros((0, vocab), np.float32), "tree_uniforms": uniforms})
        want_probs, want_draws = ref.sample(logits, uniforms, temperature, top_k, top_p)
        assert draws.shape == (n,) and draws.dtype == np.int64
        np.testing.assert_array_equal(draws, want_draws)
        np.testing.assert_allclose(probs, want_probs, rtol=0, atol=1e-5)
        if temperature == 0:
            np.testing.assert_array_equal(draws, logits.argmax(-1))


def session_of(model_proto):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(model_proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def test_a_tree_runs_draws_come_from_its_own_rows(graphs):
    """In the exported target graph: a tree run's draws are the reference's draws from that run's logits rows."""
    _, sessions, cross, _ = graphs
    rng = np.random.default_rng(11)
    _, cache = prefill(sessions["tree"], cross, 3, rng)
    _, _, tree_depth, tree_mask = random_tree(rng, 6, shuffle=True)
    ids = rng.integers(3, VOCAB, (1, 6))
    uniforms = rng.random(6, dtype=np.float32)
    for temperature, top_k, top_p in SETTINGS.values():
        logits, _, probs, _, _, draws = run(
            sessions["tree"], ids, cache, cross, (tree_depth, tree_mask),
            draft_probs=np.zeros((5, VOCAB), np.float32), uniforms=rng.random(6, dtype=np.float32),
            temperature=np.array([temperature], np.float32), top_k=np.array([top_k], np.int64),
            top_p=np.array([top_p], np.float32), tree_uniforms=uniforms)
        want_probs, want_draws = ref.sample(logits[0], uniforms, temperature, top_k, top_p)
        np.testing.assert_array_equal(draws, want_draws)
        np.testing.assert_allclose(probs, want_probs, rtol=0, atol=1e-5)


def test_zero_size_tree_tensors_bind_through_the_runtimes_binder(graphs):
    """The runtime's IO binding (runtime/engine/device.py): tree_uniforms and draws bound as [0] views of buffers
    sized for a tree, between tree runs on the same binding; outputs as session.run gives them. The empty draws is
    an If branch that is one Identity of a constant."""
    from specdec.runtime.engine.device import Binder, Buffer

    _, sessions, cross, root = graphs
    sess = sessions["tree"]
    rng = np.random.default_rng(3)
    _, cache = prefill(sess, cross, 5, rng)
    binder = Binder(sess, "cpu")
    rows = 8
    shapes = {"logits": ((1, rows, VOCAB), np.float32), "new_kv": ((rows, *cache.shape[1:]), np.float32),
              "probs": ((rows, VOCAB), np.float32), "accepted": ((1,), np.int64), "next_token": ((1,), np.int64),
              "draws": ((rows,), np.int64)}
    out = {name: Buffer(shape, dtype, "cpu") for name, (shape, dtype) in shapes.items()}
    inputs = {}

    def bind(feed):
        for name, value in feed.items():
            value = np.asarray(value)
            buf = inputs.setdefault(name, Buffer((max(value.size, 4096),), value.dtype, "cpu"))
            buf.write(value)
            binder.input(name, buf, value.shape)

    for n, tree in ((6, True), (4, False), (3, True), (1, False)):
        _, _, tree_depth, tree_mask = random_tree(rng, n, shuffle=True)
        feed = {**plain_step_feed(VOCAB, 1.0, session=sess, new=n), "input_ids": rng.integers(3, VOCAB, (1, n)),
                "past_kv": cache, "cross_kv": cross, "uniforms": rng.random(n, dtype=np.float32),
                "draft_probs": np.zeros((n - 1, VOCAB), np.float32)}
        if tree:
            feed.update(tree_depth=tree_depth, tree_mask=tree_mask, tree_uniforms=rng.random(n, dtype=np.float32))
        bind(feed)
        views = {"logits": (1, n, VOCAB), "new_kv": (n, *cache.shape[1:]), "probs": (n, VOCAB), "accepted": (1,),
                 "next_token": (1,), "draws": (n if tree else 0,)}
        for name, shape in views.items():
            binder.output(name, out[name], shape)
        binder.run()
        want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed)))
        assert want["draws"].shape == views["draws"]
        for name, shape in views.items():
            got = out[name].flat()[:int(np.prod(shape))].reshape(shape)
            np.testing.assert_array_equal(got, want[name], err_msg=f"{name} (tree {tree}, n {n})")

    graph = onnx.load(str(root / "tree.onnx"), load_external_data=False).graph
    draws_if = next(node for node in graph.node if "draws" in node.output)
    assert draws_if.op_type == "If"
    empty = next(a.g for a in draws_if.attribute if a.name == "else_branch")
    assert [node.op_type for node in empty.node] == ["Identity"]


def test_drafts_have_no_tree_inputs(tiny_export, graphs):
    """specdec-export gives the tree inputs to the target's decoder alone; a draft's graph (and its proposal loop)
    is as before."""
    manifest = json.loads((tiny_export / "manifest.json").read_text())
    tree = set(TREE_INPUTS) | set(TREE_OUTPUTS)
    for role, info in manifest["models"].items():
        names = {t["name"] for side in ("inputs", "outputs") for t in info["graphs"]["decoder"][side]}
        assert (tree <= names) if role == "target" else not (tree & names), role
        graph = session(tiny_export / info["graphs"]["decoder"]["file"])
        names = {v.name for v in graph.get_inputs() + graph.get_outputs()}
        assert (tree <= names) if role == "target" else not (tree & names), role
    plain = {v.name for v in graphs[1]["chain"].get_inputs() + graphs[1]["chain"].get_outputs()}
    assert not tree & plain
    depth, mask = chain_tree_feed(3)["tree_depth"], chain_tree_feed(3)["tree_mask"]
    assert depth.tolist() == [0, 1, 2] and mask.tolist() == np.tril(np.ones((3, 3), bool)).tolist()


def edited_copy(tiny_export, tmp_path, edit):
    from specdec.runtime.loading.manifest import load_manifest

    copy = tmp_path / "edited"
    shutil.copytree(tiny_export, copy)
    raw = json.loads((copy / "manifest.json").read_text())
    edit(raw)
    (copy / "manifest.json").write_text(json.dumps(raw))
    return lambda: load_manifest(copy)


def test_format_5_and_trees_in_the_wrong_graph_are_one_line_errors(tiny_export, tmp_path):
    from specdec.runtime.core.errors import SpecdecError

    def drop_from_target(raw):
        dec = raw["models"]["target"]["graphs"]["decoder"]
        dec["inputs"] = [t for t in dec["inputs"] if t["name"] != "tree_mask"]

    def add_to_draft(raw):
        raw["models"]["draft"]["graphs"]["decoder"]["inputs"].append(
            {"name": "tree_depth", "dtype": "int64", "shape": ["new"]})

    cases = [(lambda raw: raw.update(format_version=6), "format version 6, this specdec reads format 7 "),
             (drop_from_target, "the target decoder cannot verify a token tree (tree_mask is missing)"),
             (add_to_draft, "the draft decoder has tree_depth, a tensor of the target's alone")]
    for i, (edit, message) in enumerate(cases):
        with pytest.raises(SpecdecError) as err:
            edited_copy(tiny_export, tmp_path / str(i), edit)()
        text = str(err.value)
        assert message in text and "\n" not in text, text
        if i == 0:
            assert "re-export it with this version: specdec-export --target" in text, text
