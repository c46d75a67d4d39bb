"""A draft's whole proposal in one run (export format 4): the decoder + head graph wrapped so that it can also
iterate k autoregressive steps inside ONNX Runtime.

The draft model's graph gets one more input, `steps` [1] int64, and becomes

    If(steps > 1)
      then: Loop(steps) over the decoder + head, each iteration one sampling step (G = 0): iteration 0 reads the
            tokens of `input_ids` (those the draft's cache has not seen), iteration i > 0 the token iteration i-1
            drew; every iteration attends to past_kv (the bound cache) and to the keys and values the loop made so
            far, and takes uniform i. Outputs: next_token [k] = x_1 .. x_k, probs [k, V] = q_1 .. q_k,
            new_kv [N + k - 1, ...] (x_k is drawn, not yet run), accepted [1] = 0, logits [1, 0, V] (none).
      else: the decoder + head exactly as before (format 3): 1-token steps, verify runs, catch-up runs, beams.

Both branches read one copy of the weights (initializers of the main graph, outer scope for the subgraphs). The
loop does not take logits masks (logits processors): with processors active the runtime makes single steps. The
q rows and tokens are those k single steps would give with the same uniforms: the same nodes run on the same
values.
"""

from __future__ import annotations

import copy

import numpy as np
from onnx import TensorProto, helper

from .head import _onnx_type

STEPS = "steps"
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


def _subgraphs(node) -> list:
    """The graphs a node carries (an If's branches, a Loop's body)."""
    return [g for attr in node.attribute
            for g in ([attr.g] if attr.type == attr.GRAPH else attr.graphs if attr.type == attr.GRAPHS else [])]


def _apply(node, mapping: dict, prefix: str) -> None:
    node.input[:] = [mapping.get(name, name) for name in node.input]
    node.output[:] = [mapping.get(name, name) for name in node.output]
    if node.name:
        node.name = prefix + node.name
    for sub in _subgraphs(node):
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
    for sub in _subgraphs(node):
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
    """Rewrite a decoder + head ModelProto (export/decoder.py, export/head.py) in place as described above.
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
            name + "_v", _onnx_type(arr.dtype), arr.shape, arr.reshape(-1).tolist()))

    # the plain branch: the graph as it was
    plain_nodes = _renamed(nodes, {}, "plain/")
    kv_type = next(i for i in graph.input if i.name == "past_kv").type.tensor_type.elem_type
    kinds = (_F, kv_type, _F, _I, _I)
    plain = helper.make_graph(plain_nodes, "plain_step", [],
                              [helper.make_tensor_value_info("plain/" + name, kind, None)
                               for name, kind in zip(outputs, kinds)])

    # the loop body: (iteration, cond, ids, kv) -> (cond, ids, kv, token, q row)
    b = "loop/"
    body_nodes = [
        const(b + "one", [1], np.int64),
        const(b + "no_q", np.zeros((0, vocab), np.float32), np.float32),
        const(b + "zero_axis", [0], np.int64),
        helper.make_node("Concat", ["past_kv", b + "kv_in"], [b + "past_all"], axis=0, name=b + "past_Concat"),
        helper.make_node("Unsqueeze", [b + "i", b + "zero_axis"], [b + "i1"], name=b + "i_Unsqueeze"),
        helper.make_node("Add", [b + "i1", b + "one"], [b + "i2"], name=b + "i_Add"),
        helper.make_node("Slice", ["uniforms", b + "zero_axis" if one_uniform else b + "i1",
                                   b + "one" if one_uniform else b + "i2"], [b + "u"], name=b + "u_Slice"),
    ]
    rename = {"input_ids": b + "ids_in", "past_kv": b + "past_all", "draft_probs": b + "no_q",
              "uniforms": b + "u", "logit_mask": b + "no_q"}
    body_nodes += _renamed(nodes, rename, b)
    body_nodes += [
        helper.make_node("Identity", [b + "cond_in"], [b + "cond_out"], name=b + "cond_Identity"),
        const(b + "tok_shape", [1, 1], np.int64),
        helper.make_node("Reshape", [b + "next_token", b + "tok_shape"], [b + "ids_out"], name=b + "ids_Reshape"),
        helper.make_node("Concat", [b + "kv_in", b + "new_kv"], [b + "kv_out"], axis=0, name=b + "kv_Concat"),
        helper.make_node("Identity", [b + "next_token"], [b + "tok_out"], name=b + "tok_Identity"),
        helper.make_node("Identity", [b + "probs"], [b + "q_out"], name=b + "q_Identity"),
    ]
    body = helper.make_graph(
        body_nodes, "proposal_step",
        [helper.make_tensor_value_info(b + "i", _I, []), helper.make_tensor_value_info(b + "cond_in", _B, []),
         helper.make_tensor_value_info(b + "ids_in", _I, None), helper.make_tensor_value_info(b + "kv_in", kv_type, None)],
        [helper.make_tensor_value_info(b + "cond_out", _B, []), helper.make_tensor_value_info(b + "ids_out", _I, None),
         helper.make_tensor_value_info(b + "kv_out", kv_type, None),
         helper.make_tensor_value_info(b + "tok_out", _I, None), helper.make_tensor_value_info(b + "q_out", _F, None)])

    r = "proposal/"
    loop_nodes = [
        helper.make_node("Squeeze", [STEPS], [r + "trips"], name=r + "trips_Squeeze"),
        const(r + "true", True, np.bool_),
        const(r + "empty_start", [0], np.int64),
        helper.make_node("Slice", ["past_kv", r + "empty_start", r + "empty_start", r + "empty_start"],
                         [r + "kv0"], name=r + "kv0_Slice"),
        helper.make_node("Loop", [r + "trips", r + "true", "input_ids", r + "kv0"],
                         [r + "ids_last", r + "new_kv", r + "tokens", r + "rows"], body=body, name=r + "Loop"),
        const(r + "row_shape", [-1, vocab], np.int64),
        helper.make_node("Reshape", [r + "rows", r + "row_shape"], [r + "probs"], name=r + "probs_Reshape"),
        const(r + "flat", [-1], np.int64),
        helper.make_node("Reshape", [r + "tokens", r + "flat"], [r + "next_token"], name=r + "tokens_Reshape"),
        const(r + "accepted", [0], np.int64),
        const(r + "logits", np.zeros((1, 0, vocab), np.float32), np.float32),
    ]
    proposal = helper.make_graph(loop_nodes, "proposal", [], [
        helper.make_tensor_value_info(r + "logits", _F, None), helper.make_tensor_value_info(r + "new_kv", kv_type, None),
        helper.make_tensor_value_info(r + "probs", _F, None), helper.make_tensor_value_info(r + "accepted", _I, None),
        helper.make_tensor_value_info(r + "next_token", _I, None)])

    graph.node.extend([
        const("steps_one", [1], np.int64),
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
