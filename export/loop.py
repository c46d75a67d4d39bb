"""A draft's whole proposal in one run: the decoder + head graph wrapped so that it can also
iterate k autoregressive steps inside ONNX Runtime, after verifying a lower chain level's guesses.

The draft model's graph gets one more input, `steps` [1] int64, and becomes

    If(steps > 1)
      then: Loop over the decoder + head until k = steps tokens are made. Iteration 0 reads the tokens of
            `input_ids` (those the model's cache has not seen), the last G of which are guesses of the level below
            with their q rows in `draft_probs` [G, V] (G = 0: none): its head verifies them with uniforms 0..G
            (Algorithm 1 at this level), and the iteration keeps the n guesses kept and the token z it drew, with
            its own standardized rows for them; the rejected guesses' keys and values are dropped. Iteration i > 0
            is one sampling step (G = 0) after the token drawn before, with uniform G + i. Every iteration attends
            to past_kv (the bound cache) and to the keys and values the loop kept so far. Outputs: next_token [k]
            = t_1 .. t_k (x_1 .. x_n, z, the draws; cut to k when all G = k guesses were kept), probs [k, V] their
            rows, accepted [1] = n, new_kv [N - G + k - 1, ...] (t_k is drawn, not run), logits [1, 0, V] (none).
      else: the decoder + head exactly as before: 1-token steps, verify runs, catch-up runs, beams.

So a draft's proposal is one run for any k, and so is a chain level that verifies the level below and continues on
its own. Both branches read one copy of the weights (initializers of the main graph, outer scope for the
subgraphs). In the loop branch `logit_mask` is [0, V] (none) or [1, V]: one additive 0 / -inf row that every
iteration's head rows get (logits processors whose bans hold for the whole proposal, such as the tokens a model's
generation config suppresses; runtime/engine/workspace.py). The q rows and tokens are those the plain graph gives run
by run with the same uniforms and that mask row: the same nodes run on the same values.
"""

from __future__ import annotations

import copy

import numpy as np
from onnx import TensorProto, helper

from specdec.runtime.core.graph_io import STEPS

from .head import onnx_type
_F, _I, _B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _renamed(nodes, rename: dict, prefix: str) -> list:
    """Copies of `nodes` whose produced values get `prefix` (inputs follow `rename`, else their outer name); nested
    subgraphs (the head's If branches) are rewritten the same way."""
    produced = {out for node in nodes for out in node.output if out}
    mapping = dict(rename)
    mapping.update({name: prefix + name for name in produced if name not in mapping})
    out = []
    for node in nodes:
        new = copy.deepcopy(node)
        _apply(new, mapping, prefix)
        out.append(new)
    return out


def subgraphs(node) -> list:
    """The graphs a node carries (an If's branches, a Loop's body)."""
    return [g for attr in node.attribute
            for g in ([attr.g] if attr.type == attr.GRAPH else attr.graphs if attr.type == attr.GRAPHS else [])]


def _apply(node, mapping: dict, prefix: str) -> None:
    node.input[:] = [mapping.get(name, name) for name in node.input]
    node.output[:] = [mapping.get(name, name) for name in node.output]
    if node.name:
        node.name = prefix + node.name
    for sub in subgraphs(node):
        inner = {out for n in sub.node for out in n.output if out}
        sub_map = {k: v for k, v in mapping.items() if k not in inner}
        sub_map.update({name: prefix + name for name in inner})
        for n in sub.node:
            _apply(n, sub_map, prefix)
        for value in sub.output:
            value.name = sub_map.get(value.name, value.name)
        sub.name = prefix + sub.name


def _subgraph_reads(node) -> set:
    """Names a node's subgraphs (If branches, nested) read from outside themselves."""
    reads = set()
    for sub in subgraphs(node):
        inner = {out for n in sub.node for out in n.output} | {i.name for i in sub.input}
        for n in sub.node:
            reads |= {name for name in n.input if name and name not in inner}
            reads |= _subgraph_reads(n) - inner
        reads |= {o.name for o in sub.output if o.name not in inner}
    return reads


def topological(nodes) -> list:
    """`nodes` ordered so that every value is made before a node (or a node's subgraph) reads it. A graph
    rewritten by a quantizer may define a constant after the If node whose branch reads it: ONNX Runtime accepts
    that in a main graph but not once the graph is itself a branch."""
    maker = {out: i for i, node in enumerate(nodes) for out in node.output if out}
    needs = [{maker[name] for name in (set(node.input) | _subgraph_reads(node)) if name in maker and maker[name] != i}
             for i, node in enumerate(nodes)]
    order, state = [], [0] * len(nodes)
    for start in range(len(nodes)):
        if state[start]:
            continue
        state[start] = 1
        stack = [(start, iter(sorted(needs[start])))]
        while stack:
            i, deps = stack[-1]
            nxt = next((d for d in deps if not state[d]), None)
            if nxt is None:
                stack.pop()
                state[i] = 2
                order.append(nodes[i])
            else:
                state[nxt] = 1
                stack.append((nxt, iter(sorted(needs[nxt]))))
    return order


def add_proposal_loop(model, vocab: int, one_uniform: bool = False) -> None:
    """Rewrite a decoder + head ModelProto (export/families/t5_decoder.py, export/head.py) in place as described above.
    `one_uniform=True` draws every step with uniform 0 (steps no longer independent): a deliberately wrong loop that
    the distribution tests use to show they can fail. Never export it for users."""
    graph = model.graph
    nodes = topological(list(graph.node))
    outputs = [o.name for o in graph.output]          # logits, new_kv, probs, accepted, next_token
    del graph.node[:]
    del graph.value_info[:]
    graph.input.append(helper.make_tensor_value_info(STEPS, _I, [1]))

    def const(name, value, dtype):
        arr = np.asarray(value, dtype=dtype)
        return helper.make_node("Constant", [], [name], name=name + "_Constant", value=helper.make_tensor(
            name + "_v", onnx_type(arr.dtype), arr.shape, arr.reshape(-1).tolist()))

    def node(op, inputs, out, **attrs):
        return helper.make_node(op, inputs, [out], name=out + "_" + op, **attrs)

    # the plain branch: the graph as it was
    plain_nodes = _renamed(nodes, {}, "plain/")
    kv_type = next(i for i in graph.input if i.name == "past_kv").type.tensor_type.elem_type
    kinds = (_F, kv_type, _F, _I, _I)
    plain = helper.make_graph(plain_nodes, "plain_step", [],
                              [helper.make_tensor_value_info("plain/" + name, kind, None)
                               for name, kind in zip(outputs, kinds)])

    # the loop body: (i, cond, ids, kv, tokens, rows, n) -> (cond, ids, kv, tokens, rows, n). Iteration 0 verifies
    # the G guesses that end input_ids against draft_probs (G may be 0) and keeps what its head kept plus the token
    # it drew; iteration i > 0 is one sampling step after the token iteration i-1 drew. Every iteration attends to
    # past_kv and the kept keys and values the loop made so far.
    b, r = "loop/", "proposal/"
    body_nodes = [
        const(b + "zero", [0], np.int64), const(b + "one", [1], np.int64),
        node("Unsqueeze", [b + "i", b + "zero"], b + "i1"),
        node("Equal", [b + "i1", b + "zero"], b + "first_b"),
        node("Cast", [b + "first_b"], b + "first", to=_I),                    # 1 at iteration 0, else 0
        node("Mul", [r + "G", b + "first"], b + "g"),                         # guesses verified now
        node("Slice", ["draft_probs", b + "zero", b + "g", b + "zero"], b + "q"),
        node("Sub", [b + "one", b + "first"], b + "later"),
        node("Add", [r + "G", b + "i1"], b + "G_i"),
        node("Mul", [b + "G_i", b + "later"], b + "u_start"),                 # 0, then G + i
        node("Add", [b + "u_start", b + "g"], b + "u_last"),
        node("Add", [b + "u_last", b + "one"], b + "u_end"),                  # G + 1 uniforms, then 1
        node("Slice", ["uniforms", b + "zero" if one_uniform else b + "u_start",
                       b + "one" if one_uniform else b + "u_end"], b + "u"),
        node("Concat", ["past_kv", b + "kv_in"], b + "past_all", axis=0),
        # logit_mask [M, V], M = 0 (none) or 1 (one row for every step): this iteration's g + 1 head rows (or none)
        node("Shape", ["logit_mask"], b + "mask_m", start=0, end=1),
        node("Shape", ["logit_mask"], b + "mask_v", start=1, end=2),
        node("Add", [b + "g", b + "one"], b + "head_rows"),
        node("Mul", [b + "head_rows", b + "mask_m"], b + "mask_rows"),
        node("Concat", [b + "mask_rows", b + "mask_v"], b + "mask_shape", axis=0),
        node("Expand", ["logit_mask", b + "mask_shape"], b + "mask"),
    ]
    rename = {"input_ids": b + "ids_in", "past_kv": b + "past_all", "draft_probs": b + "q",
              "uniforms": b + "u", "logit_mask": b + "mask"}
    body_nodes += _renamed(nodes, rename, b)
    body_nodes += [
        const(b + "flat", [-1], np.int64), const(b + "tok_shape", [1, 1], np.int64),
        node("Shape", [b + "ids_in"], b + "N_i", start=1, end=2),
        node("Sub", [b + "N_i", b + "g"], b + "keep_from"),                  # where the guesses start
        node("Add", [b + "keep_from", b + "accepted"], b + "keep_to"),        # ... and the kept ones end
        node("Reshape", [b + "ids_in", b + "flat"], b + "ids_flat"),
        node("Slice", [b + "ids_flat", b + "keep_from", b + "keep_to"], b + "kept"),
        node("Concat", [b + "kept", b + "next_token"], b + "tok_new", axis=0),       # x_1 .. x_n, z
        node("Add", [b + "accepted", b + "one"], b + "rows_to"),
        node("Slice", [b + "probs", b + "zero", b + "rows_to", b + "zero"], b + "rows_new"),
        node("Slice", [b + "new_kv", b + "zero", b + "keep_to", b + "zero"], b + "kv_new"),  # rejected ones dropped
        node("Concat", [b + "kv_in", b + "kv_new"], b + "kv_out", axis=0),
        node("Concat", [b + "tok_in", b + "tok_new"], b + "tok_out", axis=0),
        node("Concat", [b + "rows_in", b + "rows_new"], b + "rows_out", axis=0),
        node("Add", [b + "n_in", b + "accepted"], b + "n_out"),              # iterations > 0 keep 0 guesses
        node("Reshape", [b + "next_token", b + "tok_shape"], b + "ids_out"),
        node("Shape", [b + "tok_out"], b + "made"),
        node("Less", [b + "made", STEPS], b + "more"),
        node("Squeeze", [b + "more"], b + "cond_out"),
    ]
    carried = (("ids", _I), ("kv", kv_type), ("tok", _I), ("rows", _F), ("n", _I))     # the loop-carried values
    body = helper.make_graph(
        body_nodes, "proposal_step",
        [helper.make_tensor_value_info(b + "i", _I, []), helper.make_tensor_value_info(b + "cond_in", _B, []),
         *(helper.make_tensor_value_info(b + name + "_in", kind, None) for name, kind in carried)],
        [helper.make_tensor_value_info(b + "cond_out", _B, []),
         *(helper.make_tensor_value_info(b + name + "_out", kind, None) for name, kind in carried)])

    loop_nodes = [
        const(r + "zero", [0], np.int64), const(r + "one", [1], np.int64),
        node("Squeeze", [STEPS], r + "trips"),
        const(r + "true", True, np.bool_),
        node("Slice", ["past_kv", r + "zero", r + "zero", r + "zero"], r + "kv0"),
        const(r + "tok0", np.zeros((0,), np.int64), np.int64),
        const(r + "rows0", np.zeros((0, vocab), np.float32), np.float32),
        helper.make_node("Loop", [r + "trips", r + "true", "input_ids", r + "kv0", r + "tok0", r + "rows0", r + "zero"],
                         [r + "ids_last", r + "kv_all", r + "tok_all", r + "rows_all", r + "accepted"], body=body,
                         name=r + "Loop"),
        node("Slice", [r + "tok_all", r + "zero", STEPS], r + "next_token"),              # k tokens
        node("Slice", [r + "rows_all", r + "zero", STEPS, r + "zero"], r + "probs"),    # their k rows
        node("Shape", ["input_ids"], r + "N", start=1, end=2),
        node("Sub", [r + "N", r + "G"], r + "unseen"),
        node("Add", [r + "unseen", STEPS], r + "kv_end1"),
        node("Sub", [r + "kv_end1", r + "one"], r + "kv_end"),       # the k-th token is drawn, not run
        node("Slice", [r + "kv_all", r + "zero", r + "kv_end", r + "zero"], r + "new_kv"),
        const(r + "logits", np.zeros((1, 0, vocab), np.float32), np.float32),
    ]
    proposal = helper.make_graph(loop_nodes, "proposal", [], [
        helper.make_tensor_value_info(r + "logits", _F, None), helper.make_tensor_value_info(r + "new_kv", kv_type, None),
        helper.make_tensor_value_info(r + "probs", _F, None), helper.make_tensor_value_info(r + "accepted", _I, None),
        helper.make_tensor_value_info(r + "next_token", _I, None)])

    graph.node.extend([
        const("steps_one", [1], np.int64),
        helper.make_node("Shape", ["draft_probs"], [r + "G"], start=0, end=1, name="proposal_G_Shape"),
        helper.make_node("Greater", [STEPS, "steps_one"], ["steps_many"], name="steps_Greater"),
        helper.make_node("Squeeze", ["steps_many"], ["steps_flag"], name="steps_Squeeze"),
        helper.make_node("If", ["steps_flag"], outputs, then_branch=proposal, else_branch=plain, name="proposal_If"),
    ])
    # a proposal returns k tokens and k rows where a step returns one
    for value in graph.output:
        dims = value.type.tensor_type.shape.dim
        if value.name == "next_token":
            dims[0].dim_param = "tokens"
        elif value.name == "probs":
            dims[0].dim_param = "rows"


def add_proposal_loop_file(path, one_uniform: bool = False) -> None:
    """Wrap the decoder graph file at `path` in place (its external weights, if any, stay where they are)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    logits = next(o for o in model.graph.output if o.name == "logits")
    vocab = logits.type.tensor_type.shape.dim[-1].dim_value
    add_proposal_loop(model, vocab, one_uniform)
    onnx.save(model, str(path))
