"""The speculative head: ONNX nodes appended to a decoder graph so one run does a decoder pass *and* Algorithm 1's
sampling work (export format 3). Built with onnx.helper, not traced, so the filter and the temperature-0 path can
be switched inside the graph with `If` nodes: one graph, one copy of the weights, no work for a branch not taken.

Inputs added to the decoder's (input_ids [B, N], past_kv, cross_kv):
    draft_probs [G, V] fp32   q_1 .. q_G of the last G tokens of input_ids (the guesses); G = 0 for a plain step
    uniforms    [G+1]  fp32   r_1 .. r_G for the acceptance tests, then one for the final draw
    temperature [1] fp32, top_k [1] int64, top_p [1] fp32, lenience [1] fp32
    logit_mask  [G+1, V] or [0, V] fp32   added to the last G+1 logits rows before anything else: 0 or -inf per
                token, the logits processors (runtime/decoding/processors.py: min length, no-repeat n-gram); [0, V] for none
Outputs added to (logits [B, N, V], new_kv):
    probs      [G+1, V] fp32  the standardized target rows p_1 .. p_{G+1} of the last G+1 positions
    accepted   [1] int64      n: guesses kept
    next_token [1] int64      drawn from norm(max(0, p_{n+1} - l q_{n+1})) after a rejection, else from p_{G+1}

The target's head (`tree=True`, format 6) also has
    tree_uniforms [M] fp32  -> draws [M] int64   one inverse-CDF draw per row of `probs` (M = G+1; at temperature 0
                              the row's argmax). A tree verify run binds M = G+1 = N, zero q rows and the decoder's
                              tree_depth/tree_mask (export/decoder.py), and reads `probs` and `draws` of every node.
                              Any other run binds tree_uniforms and draws of shape [0]: the branch is then an empty
                              constant, the cost one If on Size(tree_uniforms).

The head works on batch row 0. The speculative loop binds batch 1; beam search (runtime/engine/beam_model.py) binds more
rows and reads only their logits.

With G = 0 the head is a plain sampling step (draw from p of the last position): that is how a draft proposes
and how target-only decoding runs. With G >= 1 it is the target's verification.

standardize (paper §2.2, identical for p and q): logits / temperature, then top-k, then top-p (the smallest set of
best tokens whose mass reaches top_p, the best token always kept; tokens tied with the last one kept stay), then
softmax; at temperature 0 a one-hot argmax. The filter finds its cutoff among the CANDIDATES best logits (TopK, not
a sort of the vocabulary) and falls back to a full sort only when those cannot hold the nucleus (top_k >
CANDIDATES, or the candidates' mass is below top_p).

Acceptance at temperature > 0: guess x_i is kept while r_i < p_i(x_i) / (l q_i(x_i)) (lenience l, paper A.5; l = 1
is exact). At temperature 0 (greedy): x_i is kept iff it is the target's argmax, or, with l < 1, iff
p(x_i) >= l * max p for p before the one-hot (softmax of the filtered logits at temperature 1); the next token is
the argmax of the first row not kept (or of the last).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from specdec.runtime.core.graph_io import HEAD_INPUTS, HEAD_OUTPUTS, TREE_INPUTS, TREE_OUTPUTS

CANDIDATES = 256
INPUTS, OUTPUTS = HEAD_INPUTS, HEAD_OUTPUTS        # runtime/core/graph_io.py
TREE_INPUT, TREE_OUTPUT = TREE_INPUTS[2], TREE_OUTPUTS[0]     # tree_uniforms, draws (tree=True only)

_F, _I, _B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


class Nodes:
    """A list of ONNX nodes with fresh value names under one prefix (the main graph, or an If branch)."""

    def __init__(self, prefix: str, root: "Nodes | None" = None):
        self.prefix, self.nodes, self.count = prefix, [], 0
        self.root = root or self
        self.constants = {}     # (dtype, values) -> name, kept in the root graph so branches share them

    def fresh(self) -> str:
        self.count += 1
        return f"{self.prefix}{self.count}"

    def op(self, op_type: str, *inputs: str, n_out: int = 1, names=None, **attrs):
        outs = list(names) if names else [self.fresh() for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=outs[0] + "_" + op_type, **attrs))
        return outs[0] if n_out == 1 else outs

    def const(self, value, dtype=np.int64) -> str:
        """A constant, made once in the root graph (If branches read it from the outer scope)."""
        arr = np.asarray(value, dtype=dtype)
        key = (arr.dtype.str, arr.shape, tuple(arr.reshape(-1).tolist()))
        root = self.root
        if key not in root.constants:
            root.constants[key] = root.op("Constant", value=helper.make_tensor(
                root.fresh() + "_v", _onnx_type(arr.dtype), arr.shape, arr.reshape(-1).tolist()))
        return root.constants[key]

    def branch(self, tag: str, build) -> "helper.GraphProto":
        """An If branch: `build(nodes)` returns the output value names; types are declared, shapes left open."""
        sub = Nodes(f"{self.prefix}{tag}{self.fresh()[len(self.prefix):]}_", self.root)
        outputs = build(sub)
        return helper.make_graph(sub.nodes, sub.prefix + "graph", [],
                                 [helper.make_tensor_value_info(name, kind, None) for name, kind in outputs])

    def cond(self, flag: str, then, otherwise, kinds, names=None) -> list:
        """If(flag): then/otherwise each build the same number of outputs of types `kinds` (named `names`)."""
        a = self.branch("then", lambda s: list(zip(_as_list(then(s)), kinds)))
        b = self.branch("else", lambda s: list(zip(_as_list(otherwise(s)), kinds)))
        outs = self.op("If", flag, n_out=len(kinds), names=names, then_branch=a, else_branch=b)
        return _as_list(outs)


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _onnx_type(dtype) -> int:
    return {np.dtype(np.float32): _F, np.dtype(np.int64): _I, np.dtype(np.bool_): _B}[np.dtype(dtype)]


# -- standardize --------------------------------------------------------------------------------------------------
def _prefix_cutoff(g: Nodes, ranked: str, indices: str, k_eff: str, no_top_k: str, top_p: str, full_probs: str):
    """Cutoff logit per row from the `ranked` best logits [R, K] (descending): the value of the last token kept by
    top-k then top-p. Also returns whether the K candidates were enough to decide it, per row."""
    width = g.op("Shape", ranked, start=-1)                                   # [1] = K
    rank = g.op("Range", g.const(0), g.op("Squeeze", width), g.const(1))     # [K]
    in_k = g.op("Less", rank, k_eff)                                          # [K] (k_eff [1] broadcasts)
    masked = g.op("Where", in_k, ranked, g.const([-np.inf], np.float32))
    # normalizer: over the top-k set when it lies inside the candidates, else over the whole row (k_eff >= V)
    k_inside = g.op("LessOrEqual", k_eff, width)
    mass = g.op("Where", k_inside, g.op("Softmax", masked, axis=-1),
                g.op("GatherElements", full_probs, indices, axis=1))          # [R, K]
    cum = g.op("CumSum", mass, g.const(-1))
    before = g.op("Sub", cum, mass)                                           # mass of the better-ranked tokens
    keep = g.op("Or", g.op("Less", before, top_p), g.op("GreaterOrEqual", top_p, g.const([1.0], np.float32)))
    keep = g.op("And", keep, in_k)
    kept = g.op("ReduceSum", g.op("Cast", keep, to=_I), g.const([-1]), keepdims=1)        # [R, 1], >= 1
    cutoff = g.op("GatherElements", ranked, g.op("Sub", kept, g.const([1])), axis=1)     # [R, 1]
    # decided inside the candidates: the top-k set fits, or the nucleus ends before the last candidate
    reached = g.op("GreaterOrEqual", g.op("ReduceSum", mass, g.const([-1]), keepdims=1), top_p)
    enough = g.op("Or", k_inside, g.op("And", no_top_k, reached))             # [R, 1]
    return cutoff, enough


def _filter(g: Nodes, z: str, top_k: str, top_p: str) -> str:
    """z [R, V] -> z with -inf outside top-k and top-p."""
    vocab = g.op("Shape", z, start=-1)                                        # [1]
    k_eff = g.op("Where", g.op("Greater", top_k, g.const([0])), g.op("Min", top_k, vocab), vocab)
    full_probs = g.op("Softmax", z, axis=-1)                                 # [R, V], for top_k = 0 or >= V
    width = g.op("Min", vocab, g.const([CANDIDATES]))
    ranked, indices = g.op("TopK", z, width, axis=-1, largest=1, sorted=1, n_out=2)
    no_top_k = g.op("GreaterOrEqual", k_eff, vocab)
    cutoff, enough = _prefix_cutoff(g, ranked, indices, k_eff, no_top_k, top_p, full_probs)
    all_enough = g.op("Cast", g.op("ReduceMin", g.op("Cast", enough, to=_I), keepdims=0), to=_B)

    def full_sort(s: Nodes):
        ranked_all, indices_all = s.op("TopK", z, vocab, axis=-1, largest=1, sorted=1, n_out=2)
        return _prefix_cutoff(s, ranked_all, indices_all, k_eff, no_top_k, top_p, full_probs)[0]

    cutoff = g.cond(all_enough, lambda s: s.op("Identity", cutoff), full_sort, [_F])[0]
    return g.op("Where", g.op("Less", z, cutoff), g.const([-np.inf], np.float32), z)


def _one_hot(g: Nodes, index: str, vocab: str) -> str:
    """index [R] int64 -> [R, V] fp32 one-hot."""
    rank = g.op("Range", g.const(0), g.op("Squeeze", vocab), g.const(1))
    return g.op("Cast", g.op("Equal", g.op("Unsqueeze", index, g.const([-1])), rank), to=_F)


def _draw(g: Nodes, probs: str, uniforms: str) -> str:
    """Inverse CDF, one draw per row: the first index whose cumulative mass exceeds u * total."""
    cdf = g.op("CumSum", probs, g.const(-1))
    total = g.op("Slice", cdf, g.const([-1]), g.const([np.iinfo(np.int64).max]), g.const([-1]))
    threshold = g.op("Mul", g.op("Unsqueeze", uniforms, g.const([-1])), total)
    # counted in float32 (exact up to 2^24 tokens): onnxruntime's int64 ReduceSum is several times slower
    below = g.op("ReduceSum", g.op("Cast", g.op("LessOrEqual", cdf, threshold), to=_F), g.const([-1]), keepdims=0)
    index = g.op("Cast", below, to=_I)
    last = g.op("Sub", g.op("Shape", probs, start=-1), g.const([1]))
    return g.op("Min", index, last)


# -- the head -----------------------------------------------------------------------------------------------------
def _leading_kept(g: Nodes, rejected: str) -> str:
    """rejected [G] bool -> n [1] int64: the number of guesses before the first rejection."""
    clean = g.op("Equal", g.op("CumSum", g.op("Cast", rejected, to=_I), g.const(0)), g.const(0))
    return g.op("ReduceSum", g.op("Cast", clean, to=_I), g.const([0]), keepdims=1)


def add_head(graph, residual: bool = True, tree: bool = False) -> None:
    """Append the head to a decoder GraphProto in place (its `logits` and `input_ids` feed it). `tree=True` (a
    target's graph) adds tree_uniforms -> draws.

    `residual=False` draws from p instead of norm(max(0, p - l q)) after a rejection: a deliberately wrong sampler
    that the distribution tests use to show they can fail. Never export it for users."""
    g = Nodes("head/")
    for name, kind, shape in (("draft_probs", _F, ["gamma", "vocab"]), ("uniforms", _F, ["gamma_plus_1"]),
                              ("temperature", _F, [1]), ("top_k", _I, [1]), ("top_p", _F, [1]),
                              ("lenience", _F, [1]), ("logit_mask", _F, ["mask_rows", "vocab"])):
        graph.input.append(helper.make_tensor_value_info(name, kind, shape))

    guesses_n = g.op("Shape", "draft_probs", start=0, end=1)                  # [1] = G
    rows_n = g.op("Add", guesses_n, g.const([1]))                             # G + 1
    big = g.const([np.iinfo(np.int64).max])
    # batch row 0 (a beam run binds more rows for their logits alone; the head then works on row 0, unused)
    row0 = g.const(0)
    raw = g.op("Gather", g.op("Slice", "logits", g.op("Neg", rows_n), big, g.const([1])), row0, axis=0)  # [G+1,V]
    # logits processors (min length, no-repeat n-gram): an additive mask of 0 / -inf per row, or [0, V] for none
    masked = g.op("Greater", g.op("Size", "logit_mask"), g.const(0))
    rows = g.cond(masked, lambda s: s.op("Add", raw, "logit_mask"), lambda s: s.op("Identity", raw), [_F])[0]
    first_guess = g.op("Sub", g.op("Shape", "input_ids", start=1, end=2), guesses_n)     # N - G
    guesses = g.op("Gather", g.op("Slice", "input_ids", first_guess, big, g.const([1])), row0, axis=0)    # [G]
    guess_col = g.op("Unsqueeze", guesses, g.const([-1]))                     # [G, 1]
    vocab = g.op("Shape", rows, start=-1)

    greedy = g.op("LessOrEqual", "temperature", g.const([0.0], np.float32))
    filtered = g.op("Or", g.op("Greater", "top_k", g.const([0])), g.op("Less", "top_p", g.const([1.0], np.float32)))
    r = g.op("Slice", "uniforms", g.const([0]), guesses_n, g.const([0]))     # r_1 .. r_G
    u_last = g.op("Slice", "uniforms", guesses_n, rows_n, g.const([0]))      # the final draw's uniform
    lenience = "lenience"

    def standardized_logits(s: Nodes, z: str) -> str:
        return s.cond(filtered, lambda t: _filter(t, z, "top_k", "top_p"), lambda t: t.op("Identity", z), [_F])[0]

    def greedy_path(s: Nodes):
        # argmax of the filtered logits = argmax of the logits (the best token always survives the filter)
        best = s.op("ArgMax", rows, axis=-1, keepdims=0)                      # [G+1]
        best_g = s.op("Slice", best, s.const([0]), guesses_n, s.const([0]))
        rejected = s.op("Not", s.op("Equal", guesses, best_g))

        def lenient(t: Nodes):      # p(x) >= l max p  <=>  z(x) - max z >= log l (z filtered, temperature 1)
            zg = standardized_logits(t, t.op("Slice", rows, t.const([0]), guesses_n, t.const([0])))
            gap = t.op("Sub", t.op("GatherElements", zg, guess_col, axis=1), t.op("ReduceMax", zg, axes=[-1],
                                                                                 keepdims=1))
            ok = t.op("GreaterOrEqual", t.op("Squeeze", gap, t.const([-1])), t.op("Log", lenience))
            return t.op("And", rejected, t.op("Not", ok))

        strict = s.op("Less", lenience, s.const([1.0], np.float32))
        rejected = s.cond(strict, lenient, lambda t: t.op("Identity", rejected), [_B])[0]
        n = _leading_kept(s, rejected)
        return _one_hot(s, best, vocab), n, s.op("Gather", best, n, axis=0)

    def sampling_path(s: Nodes):
        z = standardized_logits(s, s.op("Div", rows, "temperature"))
        p = s.op("Softmax", z, axis=-1)                                       # [G+1, V]
        p_g = s.op("Slice", p, s.const([0]), guesses_n, s.const([0]))
        p_x = s.op("Squeeze", s.op("GatherElements", p_g, guess_col, axis=1), s.const([-1]))
        q_x = s.op("Squeeze", s.op("GatherElements", "draft_probs", guess_col, axis=1), s.const([-1]))
        rejected = s.op("GreaterOrEqual", s.op("Mul", s.op("Mul", r, lenience), q_x), p_x)   # not r < p/(l q)
        n = _leading_kept(s, rejected)
        p_n = s.op("Gather", p, n, axis=0)                                    # [1, V]
        if residual:
            def after_rejection(t: Nodes):
                q_n = t.op("Gather", "draft_probs", n, axis=0)
                left = t.op("Relu", t.op("Sub", p_n, t.op("Mul", lenience, q_n)))
                # p == q leaves no residual mass (then no rejection can happen); fall back to p for round-off
                some = t.op("Greater", t.op("ReduceSum", left, t.const([-1]), keepdims=1), t.const([0.0], np.float32))
                return t.op("Where", some, left, p_n)

            was_rejected = s.op("Squeeze", s.op("Less", n, guesses_n), s.const([0]))
            dist = s.cond(was_rejected, after_rejection, lambda t: t.op("Identity", p_n), [_F])[0]
        else:
            dist = p_n
        return p, n, _draw(s, dist, u_last)

    g.cond(greedy, greedy_path, sampling_path, [_F, _I, _I], names=OUTPUTS)
    outputs = [("probs", _F, ["gamma_plus_1", "vocab"]), ("accepted", _I, [1]), ("next_token", _I, [1])]
    if tree:
        graph.input.append(helper.make_tensor_value_info(TREE_INPUT, _F, ["tree_rows"]))
        # one draw per row of probs (one-hot at temperature 0: the argmax); none when tree_uniforms is empty
        wanted = g.op("Greater", g.op("Size", TREE_INPUT), g.const(0))
        g.cond(wanted, lambda s: _draw(s, "probs", TREE_INPUT),
               lambda s: s.op("Identity", s.const(np.zeros(0, np.int64))), [_I], names=[TREE_OUTPUT])
        outputs.append((TREE_OUTPUT, _I, ["tree_rows"]))
    graph.node.extend(g.nodes)
    for name, kind, shape in outputs:
        graph.output.append(helper.make_tensor_value_info(name, kind, shape))


def head_only_model(opset: int = 17, residual: bool = True, tree: bool = False):
    """The head as a graph of its own (inputs logits [B, N, V] and input_ids [B, N]; it reads batch row 0): for
    tests and for timing the sampling work apart from the decoder. `tree=True`: the target's head."""
    graph = helper.make_graph([], "speculative_head",
                              [helper.make_tensor_value_info("input_ids", _I, ["batch", "new"]),
                               helper.make_tensor_value_info("logits", _F, ["batch", "new", "vocab"])], [])
    add_head(graph, residual, tree)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def plain_step_feed(vocab: int, temperature: float = 0.0, session=None, new: int = 1) -> dict:
    """Head inputs for a plain step over `new` tokens (G = 0), e.g. to run a decoder graph for its logits alone; with
    an onnxruntime `session` also what that graph's extra inputs need: `steps` = 1 for a format-5 draft graph
    (export/loop.py), and for a target graph (format 6) a chain's tree_depth = arange(new) and tree_mask = the lower
    triangle, and no tree draws (tree_uniforms [0])."""
    names = {i.name for i in session.get_inputs()} if session is not None else set()
    extra = {"steps": np.ones(1, np.int64)} if "steps" in names else {}
    if TREE_INPUT in names:
        extra.update(chain_tree_feed(new))
    return {**extra, "draft_probs": np.zeros((0, vocab), np.float32), "uniforms": np.zeros(1, np.float32),
            "temperature": np.array([temperature], np.float32), "top_k": np.zeros(1, np.int64),
            "top_p": np.ones(1, np.float32), "lenience": np.ones(1, np.float32),
            "logit_mask": np.zeros((0, vocab), np.float32)}


def chain_tree_feed(new: int) -> dict:
    """The tree inputs of a target graph's chain run over `new` tokens: what a format-5 target graph computed."""
    return {"tree_depth": np.arange(new, dtype=np.int64), "tree_mask": np.tril(np.ones((new, new), np.bool_)),
            TREE_INPUT: np.zeros(0, np.float32)}
