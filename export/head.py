"""The speculative head: ONNX nodes appended to a decoder graph so one run does a decoder pass *and* Algorithm 1's
sampling work for every batch row. Built with onnx.helper, not traced, so the filter and the
temperature-0 path can be switched inside the graph with `If` nodes: one graph, one copy of the weights, no work for a
branch not taken.

B = batch rows of input_ids [B, N], G = guesses (the second-to-last axis of draft_probs), V = vocabulary. Inputs added
to the decoder's (input_ids, past_kv, cross_kv); each per-row input is either shared by every row or given per row:
    draft_probs [G, V] or [B, G, V] fp32  q_1 .. q_G of the last G columns of input_ids (the guesses); G = 0 for a
                                          plain step
    uniforms    [G+1] or [B, G+1] fp32    r_1 .. r_G for the acceptance tests; the last column draws the next token
    temperature, top_k (int64), top_p, lenience   [1] or [B]
    logit_mask  [0, V] (none), [G+1, V] (every row) or [B*(G+1), V] (row-major by batch row) fp32   added to the
                last G+1 logits rows of each batch row before anything else: 0 or -inf per token, the logits
                processors (runtime/decoding/processors.py: min length, no-repeat n-gram)
    guess_counts [1] or [B] int64 (optional)   G_b <= G, the real guesses of row b: input_ids[b, N-G : N-G+G_b];
                the columns after them are padding, never kept. An overridable initializer (GUESS_COUNTS) of value
                [-1]: every row has G guesses unless it is fed
Outputs added to (logits [B, N, V], new_kv):
    probs      [B*(G+1), V] fp32  per batch row (row 0 first), the standardized target rows p_1 .. p_{G+1} of its
                                  last G+1 positions
    accepted   [B] int64          n_b: the leading guesses kept, at most G_b
    next_token [B] int64          drawn with the row's last uniform from norm(max(0, p_{n+1} - l q_{n+1})) after a
                                  rejection (n_b < G_b), else from p_{n+1}
At B = 1 with every input in its shared form this is the head of batch 1: probs [G+1, V], accepted and next_token [1].

The target's head (`tree=True`) also has
    tree_uniforms [M] fp32  -> draws [M] int64   one inverse-CDF draw per row of `probs` (M = B*(G+1); at
                              temperature 0 the row's argmax). A tree verify run binds B = 1, M = G+1 = N, zero q rows
                              and the decoder's tree_depth/tree_mask (export/tracing.py), and reads `probs` and `draws`
                              of every node. Any other run binds tree_uniforms and draws of shape [0]: the branch is
                              then an empty constant, the cost one If on Size(tree_uniforms).

With G = 0 the head is a plain sampling step (draw from p of the last position): that is how a draft proposes, how
target-only decoding runs, and what beam search (runtime/engine/beam_model.py) gets for its rows, whose logits alone
it reads. With G >= 1 it is the target's verification.

standardize (paper §2.2, identical for p and q), per row with that row's parameters: logits / temperature, then top-k,
then top-p (the smallest set of best tokens whose mass reaches top_p, the best token always kept; tokens tied with the
last one kept stay), then softmax; at temperature <= 0 a one-hot argmax. top_k = 0 (or >= V) with top_p >= 1 leaves a
row unfiltered. The filter finds its cutoff among the CANDIDATES best logits (TopK, not a sort of the vocabulary) and
falls back to a full sort only when those cannot hold some row's nucleus (top_k > CANDIDATES, or the candidates' mass
is below top_p). Greedy and sampling rows may share a batch; a batch of greedy rows computes no p (no softmax), an
unfiltered batch no TopK.

Acceptance of a sampling row: guess x_i is kept while r_i < p_i(x_i) / (l q_i(x_i)) (lenience l, paper A.5; l = 1
is exact). A greedy row (temperature <= 0) keeps x_i iff it is the target's argmax, or, with l < 1, iff
p(x_i) >= l * max p for p before the one-hot (softmax of the filtered logits at temperature 1); its next token is
the argmax of row n (the first row not kept, or row G_b).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from specdec.runtime.core.graph_io import GUESS_COUNTS, HEAD_INPUTS, HEAD_OUTPUTS, TREE_INPUTS, TREE_OUTPUTS

CANDIDATES = 256
INPUTS, OUTPUTS = HEAD_INPUTS, HEAD_OUTPUTS        # runtime/core/graph_io.py
TREE_INPUT, TREE_OUTPUT = TREE_INPUTS[2], TREE_OUTPUTS[0]     # tree_uniforms, draws (tree=True only)

_F, _I, _B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


class Nodes:
    """A list of ONNX nodes with fresh value names under one prefix (the main graph, or an If branch)."""

    def __init__(self, prefix: str):
        self.prefix, self.nodes, self.count = prefix, [], 0
        self.constants = {}     # (dtype, shape, values) -> name

    def fresh(self) -> str:
        self.count += 1
        return f"{self.prefix}{self.count}"

    def op(self, op_type: str, *inputs: str, n_out: int = 1, names=None, **attrs):
        outs = list(names) if names else [self.fresh() for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=outs[0] + "_" + op_type, **attrs))
        return outs[0] if n_out == 1 else outs

    def const(self, value, dtype=np.int64) -> str:
        """A constant, made once per graph. Each If branch makes its own: ONNX Runtime turns them into initializers,
        while a value read from an outer graph is handed down through every If between (a cost per run)."""
        arr = np.asarray(value, dtype=dtype)
        key = (arr.dtype.str, arr.shape, tuple(arr.reshape(-1).tolist()))
        if key not in self.constants:
            self.constants[key] = self.op("Constant", value=helper.make_tensor(
                self.fresh() + "_v", onnx_type(arr.dtype), arr.shape, arr.reshape(-1).tolist()))
        return self.constants[key]

    def branch(self, tag: str, build) -> "helper.GraphProto":
        """An If branch: `build(nodes)` returns the output value names; types are declared, shapes left open."""
        sub = Nodes(f"{self.prefix}{tag}{self.fresh()[len(self.prefix):]}_")
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


def onnx_type(dtype) -> int:
    return {np.dtype(np.float32): _F, np.dtype(np.int64): _I, np.dtype(np.bool_): _B}[np.dtype(dtype)]


# -- standardize --------------------------------------------------------------------------------------------------
# Values are [B, R, V] (batch row, position, vocabulary); per-row parameters are shaped [B, 1, 1] or [1, 1, 1].
def _prefix_cutoff(g: Nodes, ranked: str, indices: str, k_eff: str, no_top_k: str, top_p: str, no_top_p: str,
                   full_probs: str):
    """Cutoff logit per row from the `ranked` best logits [B, R, K] (descending): the value of the last token kept by
    top-k then top-p. Also returns whether the K candidates were enough to decide it, per row."""
    width = g.op("Shape", ranked, start=-1)                                   # [1] = K
    rank = g.op("Range", g.const(0), g.op("Squeeze", width), g.const(1))     # [K]
    in_k = g.op("Less", rank, k_eff)                                          # [B, 1, K]
    masked = g.op("Where", in_k, ranked, g.const([-np.inf], np.float32))
    # normalizer: over the top-k set when it lies inside the candidates, else over the whole row (k_eff >= V)
    k_inside = g.op("LessOrEqual", k_eff, width)
    mass = g.op("Where", k_inside, g.op("Softmax", masked, axis=-1),
                g.op("GatherElements", full_probs, indices, axis=-1))         # [B, R, K]
    cum = g.op("CumSum", mass, g.const(-1))
    before = g.op("Sub", cum, mass)                                           # mass of the better-ranked tokens
    keep = g.op("Or", g.op("Less", before, top_p), no_top_p)
    keep = g.op("And", keep, in_k)
    kept = g.op("ReduceSum", g.op("Cast", keep, to=_I), g.const([-1]), keepdims=1)        # [B, R, 1], >= 1
    cutoff = g.op("GatherElements", ranked, g.op("Sub", kept, g.const([1])), axis=-1)    # [B, R, 1]
    # decided inside the candidates: the top-k set fits, or the nucleus ends before the last candidate
    reached = g.op("GreaterOrEqual", g.op("ReduceSum", mass, g.const([-1]), keepdims=1), top_p)
    enough = g.op("Or", k_inside, g.op("And", no_top_k, reached))             # [B, R, 1]
    return cutoff, enough


def _filter(g: Nodes, z: str, top_k: str, top_p: str) -> str:
    """z [B, R, V] -> z with -inf outside each batch row's top-k and top-p (top_k, top_p [1] or [B]). A row with
    top_k = 0 (or >= V) and top_p >= 1 is left as it is and never asks for the full sort."""
    vocab = g.op("Shape", z, start=-1)                                        # [1]
    top_k = g.op("Reshape", top_k, g.const([-1, 1, 1]))
    top_p = g.op("Reshape", top_p, g.const([-1, 1, 1]))
    k_eff = g.op("Where", g.op("Greater", top_k, g.const([0])), g.op("Min", top_k, vocab), vocab)   # [B, 1, 1]
    full_probs = g.op("Softmax", z, axis=-1)                                 # for top_k = 0 or >= V
    width = g.op("Min", vocab, g.const([CANDIDATES]))
    ranked, indices = g.op("TopK", z, width, axis=-1, largest=1, sorted=1, n_out=2)
    no_top_k = g.op("GreaterOrEqual", k_eff, vocab)
    no_top_p = g.op("GreaterOrEqual", top_p, g.const([1.0], np.float32))
    unfiltered = g.op("And", no_top_k, no_top_p)                              # [B, 1, 1]
    cutoff, enough = _prefix_cutoff(g, ranked, indices, k_eff, no_top_k, top_p, no_top_p, full_probs)
    enough = g.op("Or", enough, unfiltered)
    all_enough = g.op("Cast", g.op("ReduceMin", g.op("Cast", enough, to=_I), keepdims=0), to=_B)

    def full_sort(s: Nodes):
        ranked_all, indices_all = s.op("TopK", z, vocab, axis=-1, largest=1, sorted=1, n_out=2)
        return _prefix_cutoff(s, ranked_all, indices_all, k_eff, no_top_k, top_p, no_top_p, full_probs)[0]

    cutoff = g.cond(all_enough, lambda s: s.op("Identity", cutoff), full_sort, [_F])[0]
    cutoff = g.op("Where", unfiltered, g.const([-np.inf], np.float32), cutoff)
    return g.op("Where", g.op("Less", z, cutoff), g.const([-np.inf], np.float32), z)


def _one_hot(g: Nodes, index: str, vocab: str) -> str:
    """index [R, 1] int64 -> [R, V] fp32 one-hot."""
    rank = g.op("Range", g.const(0), g.op("Squeeze", vocab), g.const(1))
    return g.op("Cast", g.op("Equal", index, rank), to=_F)


def _draw(g: Nodes, probs: str, u_col: str) -> str:
    """Inverse CDF, one draw per row of probs [R, V] with u_col [R, 1] (or [1]): the first index whose cumulative
    mass exceeds u * total. -> [R]"""
    cdf = g.op("CumSum", probs, g.const(-1))
    total = g.op("Slice", cdf, g.const([-1]), g.const([np.iinfo(np.int64).max]), g.const([-1]))
    threshold = g.op("Mul", u_col, total)
    # counted in float32 (exact up to 2^24 tokens): onnxruntime's int64 ReduceSum is several times slower
    below = g.op("ReduceSum", g.op("Cast", g.op("LessOrEqual", cdf, threshold), to=_F), g.const([-1]), keepdims=0)
    index = g.op("Cast", below, to=_I)
    last = g.op("Sub", g.op("Shape", probs, start=-1), g.const([1]))
    return g.op("Min", index, last)


# -- the head -----------------------------------------------------------------------------------------------------
def _leading_kept(g: Nodes, rejected: str, counts: str) -> str:
    """rejected [B, G] bool, counts [B, 1] (or [1, 1]) -> n [B, 1] int64: the number of guesses before the first
    rejection, at most the row's guess count: the first maximum of the rejections with a rejected column appended
    ([B, G + 1], so G when none is rejected). The axis is never empty: at G = 0 onnxruntime before 1.32 kept an empty
    reduced axis at 0, and the head's `accepted` failed to squeeze."""
    flags = g.op("Pad", g.op("Cast", rejected, to=_F), g.const([0, 0, 0, 1]), g.const(1.0, np.float32))   # [B, G + 1]
    return g.op("Min", g.op("ArgMax", flags, axis=-1, keepdims=1), counts)


def add_head(graph, residual: bool = True, tree: bool = False) -> None:
    """Append the head to a decoder GraphProto in place (its `logits` and `input_ids` feed it). `tree=True` (a
    target's graph) adds tree_uniforms -> draws.

    `residual=False` draws from p instead of norm(max(0, p - l q)) after a rejection: a deliberately wrong sampler
    that the distribution tests use to show they can fail. Never export it for users.

    Large values ([B, G+1, V]) are made inside the If branch that needs them, by the op that computes them, never
    passed through an If by Identity: ONNX Runtime copies a value that leaves a branch unchanged."""
    g = Nodes("head/")
    for name, kind, shape in (("draft_probs", _F, None), ("uniforms", _F, None),     # rank 2 or 3, 1 or 2
                              ("temperature", _F, ["temperature_rows"]), ("top_k", _I, ["top_k_rows"]),
                              ("top_p", _F, ["top_p_rows"]), ("lenience", _F, ["lenience_rows"]),
                              ("logit_mask", _F, ["mask_rows", "vocab"])):
        graph.input.append(helper.make_tensor_value_info(name, kind, shape))
    # optional: an input that is also an initializer (ONNX Runtime's overridable initializers), -1 = all G guesses
    graph.input.append(helper.make_tensor_value_info(GUESS_COUNTS, _I, ["guess_count_rows"]))
    graph.initializer.append(helper.make_tensor(GUESS_COUNTS, _I, [1], [-1]))

    guesses_n = g.op("Shape", "draft_probs", start=-2, end=-1)                # [1] = G
    rows_n = g.op("Add", guesses_n, g.const([1]))                             # G + 1
    big = g.const([np.iinfo(np.int64).max])
    first_row = g.op("Neg", rows_n)

    def last_rows(s: Nodes) -> str:                                           # [B, G+1, V]
        return s.op("Slice", "logits", first_row, big, s.const([1]))

    def add_mask(s: Nodes) -> str:          # [G+1, V] (every batch row) or [B*(G+1), V] -> [1 or B, G+1, V]
        shape = s.op("Concat", s.const([-1]), rows_n, s.op("Shape", "logit_mask", start=-1), axis=0)
        return s.op("Add", last_rows(s), s.op("Reshape", "logit_mask", shape))

    # logits processors (min length, no-repeat n-gram): an additive mask of 0 / -inf per row, or [0, V] for none
    masked = g.op("Greater", g.op("Size", "logit_mask"), g.const(0))
    rows = g.cond(masked, add_mask, last_rows, [_F])[0]
    first_guess = g.op("Sub", g.op("Shape", "input_ids", start=1, end=2), guesses_n)     # N - G
    guesses = g.op("Slice", "input_ids", first_guess, big, g.const([1]))     # [B, G]
    vocab = g.op("Shape", "logits", start=-1)
    counts = g.op("Mod", g.op("Reshape", GUESS_COUNTS, g.const([-1, 1])), rows_n)   # G_b [B, 1] (-1 -> G)
    # values only some branches read are made in those branches (a branch cannot read a sibling's values)

    def standardized(s: Nodes, make_z, use, kinds) -> list:
        """use(t, z) for the logits z = make_z(t), filtered by each row's top-k and top-p when some row asks for it."""
        filtered = s.op("Or", s.op("Greater", s.op("ReduceMax", "top_k"), s.const(0)),
                        s.op("Less", s.op("ReduceMin", "top_p"), s.const(1.0, np.float32)))
        return s.cond(filtered, lambda t: use(t, _filter(t, make_z(t), "top_k", "top_p")),
                      lambda t: use(t, make_z(t)), kinds)

    def lenient_ok(s: Nodes, z: str, guess_idx: str, lenience: str) -> str:
        """Per guess [B, G], for rows with l < 1: p(x) >= l max p  <=>  z(x) - max z >= log l (z [B, G+1, V]
        filtered, temperature 1)."""
        best = s.op("Slice", s.op("ReduceMax", z, axes=[-1], keepdims=1), s.const([0]), guesses_n, s.const([1]))
        gap = s.op("Squeeze", s.op("Sub", s.op("GatherElements", z, guess_idx, axis=2), best), s.const([-1]))
        ok = s.op("GreaterOrEqual", gap, s.op("Log", lenience))
        return s.op("And", ok, s.op("Less", lenience, s.const([1.0], np.float32)))

    def not_argmax(s: Nodes, best: str) -> str:                               # [B, G]
        return s.op("Not", s.op("Equal", guesses, s.op("Slice", best, s.const([0]), guesses_n, s.const([1]))))

    def greedy_path(s: Nodes):
        # argmax of the filtered logits = argmax of the logits (the best token always survives the filter)
        best = s.op("ArgMax", rows, axis=-1, keepdims=0)                      # [B, G+1]
        rejected = not_argmax(s, best)

        def lenient(t: Nodes):
            guess_idx = t.op("Unsqueeze", guesses, t.const([-1]))             # [B, G, 1]
            lenience = t.op("Reshape", "lenience", t.const([-1, 1]))          # [B, 1] or [1, 1]
            ok = standardized(t, lambda u: rows, lambda u, z: lenient_ok(u, z, guess_idx, lenience), [_B])[0]
            return t.op("And", rejected, t.op("Not", ok))

        strict = s.op("Less", s.op("ReduceMin", "lenience"), s.const(1.0, np.float32))
        rejected = s.cond(strict, lenient, lambda t: t.op("Identity", rejected), [_B])[0]
        n = _leading_kept(s, rejected, counts)
        probs = _one_hot(s, s.op("Reshape", best, s.const([-1, 1])), vocab)  # [B*(G+1), V]
        return probs, n, s.op("GatherND", best, n, batch_dims=1)

    def sampling_path(s: Nodes, mixed: bool):
        """Every row samples; `mixed`: then the rows at temperature <= 0 are made greedy (one-hot rows, the greedy
        acceptance, the argmax of row n), their lenient test reading the filtered logits at temperature 1."""
        guess_idx = s.op("Unsqueeze", guesses, s.const([-1]))                 # [B, G, 1]
        lenience = s.op("Reshape", "lenience", s.const([-1, 1]))              # [B, 1] or [1, 1]
        r = s.op("Slice", "uniforms", s.const([0]), guesses_n, s.const([-1]))    # r_1 .. r_G: [G] or [B, G]
        u_last = s.op("Slice", "uniforms", guesses_n, rows_n, s.const([-1]))     # [1] or [B, 1]
        temperature = s.op("Reshape", "temperature", s.const([-1, 1, 1]))
        if mixed:
            greedy_rows = s.op("LessOrEqual", temperature, s.const([0.0], np.float32))      # [B, 1, 1]
            temperature = s.op("Where", greedy_rows, s.const([1.0], np.float32), temperature)

        def probs_of(t: Nodes, z: str):     # [B*(G+1), V]: made here, the If's output is the head's `probs`
            p = t.op("Softmax", t.op("Flatten", z, axis=-1), axis=-1)
            return [p, lenient_ok(t, z, guess_idx, lenience)] if mixed else p

        made = standardized(s, lambda t: t.op("Div", rows, temperature), probs_of, [_F, _B] if mixed else [_F])
        p = made[0]
        rows_shape = s.op("Shape", rows)
        p3 = s.op("Reshape", p, rows_shape)                                   # [B, G+1, V]
        p_x = s.op("Squeeze", s.op("GatherElements", p3, guess_idx, axis=2), s.const([-1]))     # [B, G]
        # q: draft_probs [B, G, V] as given (or [G, V] at B = 1), else one [G, V] (or [1, G, V]) for every row
        batch = s.op("Shape", "logits", start=0, end=1)
        whole = s.op("Equal", s.op("Size", "draft_probs"),
                     s.op("ReduceProd", s.op("Concat", batch, guesses_n, vocab, axis=0)))
        q_shape = s.op("Concat", batch, s.const([-1]), vocab, axis=0)

        def q_rows(t: Nodes) -> str:                                          # [B, G, V]
            return t.op("Reshape", "draft_probs", q_shape)

        def q_shared(t: Nodes) -> str:                                        # [B, G, V], copied
            return t.op("Expand", "draft_probs", t.op("Concat", batch, t.const([1, 1]), axis=0))

        q_x = s.cond(whole, lambda t: t.op("GatherElements", q_rows(t), guess_idx, axis=2),
                     lambda t: t.op("GatherElements", q_shared(t), guess_idx, axis=2), [_F])[0]
        q_x = s.op("Squeeze", q_x, s.const([-1]))                              # [B, G]
        rejected = s.op("GreaterOrEqual", s.op("Mul", s.op("Mul", r, lenience), q_x), p_x)   # not r < p/(l q)
        if mixed:
            greedy_col = s.op("Squeeze", greedy_rows, s.const([-1]))          # [B, 1]
            best = s.op("ArgMax", rows, axis=-1, keepdims=0)
            greedy_rejected = s.op("And", not_argmax(s, best), s.op("Not", made[1]))
            rejected = s.op("Or", s.op("And", greedy_col, greedy_rejected),   # Where has no bool kernel
                            s.op("And", s.op("Not", greedy_col), rejected))
            greedy_flat = s.op("Reshape", s.op("Expand", greedy_rows, s.op("Concat", batch, rows_n, s.const([1]),
                                                                            axis=0)), s.const([-1, 1]))
            p = s.op("Where", greedy_flat, _one_hot(s, s.op("Reshape", best, s.const([-1, 1])), vocab), p)
            p3 = s.op("Reshape", p, rows_shape)
        n = _leading_kept(s, rejected, counts)                                # [B, 1]
        p_n = s.op("GatherND", p3, n, batch_dims=1)                           # [B, V]
        if not residual:
            return p, n, _draw(s, p_n, u_last)

        def after_rejection(t: Nodes):
            # a row that kept all its guesses (n = G) reads any q row: it is not used
            n_q = t.op("Min", n, t.op("Sub", guesses_n, t.const([1])))
            def q_one(u: Nodes) -> str:                                      # the one [G, V] of every row
                return u.op("Reshape", "draft_probs", u.op("Concat", guesses_n, vocab, axis=0))

            q_n = t.cond(whole, lambda u: u.op("GatherND", q_rows(u), n_q, batch_dims=1),
                         lambda u: u.op("Gather", q_one(u), u.op("Squeeze", n_q, u.const([1])), axis=0), [_F])[0]
            left = t.op("Relu", t.op("Sub", p_n, t.op("Mul", lenience, q_n)))
            # p == q leaves no residual mass (then no rejection can happen); fall back to p for round-off
            some = t.op("Greater", t.op("ReduceSum", left, t.const([-1]), keepdims=1), t.const([0.0], np.float32))
            use = t.op("And", some, t.op("Less", n, counts))                  # a real rejection in this row
            if mixed:
                use = t.op("And", use, t.op("Not", greedy_col))
            return _draw(t, t.op("Where", use, left, p_n), u_last)

        some_rejected = s.op("Less", s.op("ReduceMin", s.op("Sub", n, counts)), s.const(0))
        return p, n, s.cond(some_rejected, after_rejection, lambda t: _draw(t, p_n, u_last), [_I])[0]

    def some_greedy_path(s: Nodes):
        all_greedy = s.op("LessOrEqual", s.op("ReduceMax", "temperature"), s.const(0.0, np.float32))
        return s.cond(all_greedy, greedy_path, lambda t: sampling_path(t, True), [_F, _I, _I])

    # sampling (no row greedy), the costlier path, is one If deep; all greedy and mixed batches two
    some_greedy = g.op("LessOrEqual", g.op("ReduceMin", "temperature"), g.const(0.0, np.float32))
    _, n, _ = g.cond(some_greedy, some_greedy_path, lambda s: sampling_path(s, False),
                     [_F, _I, _I], names=[OUTPUTS[0], g.fresh(), OUTPUTS[2]])
    g.op("Squeeze", n, g.const([1]), names=[OUTPUTS[1]])                      # [B]
    outputs = [("probs", _F, ["head_rows", "vocab"]), ("accepted", _I, ["batch"]), ("next_token", _I, ["batch"])]
    if tree:
        graph.input.append(helper.make_tensor_value_info(TREE_INPUT, _F, ["tree_rows"]))
        # one draw per row of probs (one-hot at temperature 0: the argmax); none when tree_uniforms is empty
        wanted = g.op("Greater", g.op("Size", TREE_INPUT), g.const(0))
        none = g.const(np.zeros(0, np.int64))
        g.cond(wanted, lambda s: _draw(s, "probs", s.op("Unsqueeze", TREE_INPUT, s.const([-1]))),
               lambda s: s.op("Identity", none), [_I], names=[TREE_OUTPUT])
        outputs.append((TREE_OUTPUT, _I, ["tree_rows"]))
    graph.node.extend(g.nodes)
    for name, kind, shape in outputs:
        graph.output.append(helper.make_tensor_value_info(name, kind, shape))


def head_only_model(opset: int = 17, residual: bool = True, tree: bool = False):
    """The head as a graph of its own (inputs logits [B, N, V] and input_ids [B, N]): for tests and for timing the
    sampling work apart from the decoder. `tree=True`: the target's head."""
    graph = helper.make_graph([], "speculative_head",
                              [helper.make_tensor_value_info("input_ids", _I, ["batch", "new"]),
                               helper.make_tensor_value_info("logits", _F, ["batch", "new", "vocab"])], [])
    add_head(graph, residual, tree)
    return standalone_model(graph, opset)


def standalone_model(graph, opset: int = 17):
    """A graph built here as a model of its own, with the IR version its opset needs rather than the installed onnx
    package's newest (onnx 1.23 writes IR 14, which onnxruntime before 1.32 refuses to load); the graphs torch
    exports carry the same (IR 8 at opset 17)."""
    imports = [helper.make_opsetid("", opset)]
    return helper.make_model(graph, opset_imports=imports, ir_version=helper.find_min_ir_version_for(imports))


def plain_step_feed(vocab: int, temperature: float = 0.0, session=None, new: int = 1) -> dict:
    """Head inputs for a plain step over `new` tokens (G = 0), e.g. to run a decoder graph for its logits alone; with
    an onnxruntime `session` also what that graph's extra inputs need: `steps` = 1 for a draft graph with its proposal loop
    (export/loop.py), and for a target graph a chain's tree_depth = arange(new) and tree_mask = the lower
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
    """The tree inputs of a target graph's chain run over `new` tokens: what a target graph without tree inputs computed."""
    return {"tree_depth": np.arange(new, dtype=np.int64), "tree_mask": np.tril(np.ones((new, new), np.bool_)),
            TREE_INPUT: np.zeros(0, np.float32)}
