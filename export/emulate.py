"""An int8 graph as a given CPU kernel computes it, on any machine: every MatMulInteger rewritten into ops whose
result does not depend on the CPU (runtime/engine/int8cpu.py says what each kernel does).

- ``vnni`` (exact): (a - a_zero) @ (b - b_zero) as an int32 MatMul (MatMulInteger's own accumulator).
- ``avx2``: the exact product, plus the int16 saturation of every pair of weight rows (2j, 2j+1) whose magnitudes
  sum past PAIR_BOUND in some column (only such a pair can saturate): for those pairs the raw pair products
  a0 * w0 + a1 * w1 are formed [..., M, pairs, N] in float64 (exact), clipped to int16, and the difference added.
  A graph whose weights all keep within the bound (every int8 export since this check) has no such pair, and its
  avx2 graph is its exact one.

The export's parity check runs the int8 graphs both ways (export/check.py); tests compare the rewrite with
`matmul_integer`, the NumPy reference, and that with ONNX Runtime's own kernel on the machine that runs them.
"""

from __future__ import annotations

import itertools

import numpy as np

from specdec.runtime.engine.int8cpu import INT16_MAX, KERNELS, PAIR_BOUND, pair_sums

from .loop import subgraphs


def emulated(model, kernel: str):
    """A copy of the ONNX `model` whose MatMulInteger nodes compute as `kernel` does; their weight operand must be
    an initializer (as in every int8 export)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    if kernel not in KERNELS:
        raise ValueError(f"unknown int8 kernel {kernel!r}: one of {', '.join(KERNELS)}")
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
    extra = []

    def const(name, array):
        extra.append(numpy_helper.from_array(array, name))
        return name

    counter = itertools.count()

    def rewrite(g, outer):
        """Rewrite the MatMulInteger nodes of graph `g` and of its subgraphs (a draft's proposal runs its steps in
        an If and a Loop); `outer`: the initializers its nodes can reach from enclosing graphs."""
        scope = {**outer, **{t.name: t for t in g.initializer}}
        nodes = []
        for node in g.node:
            for sub in subgraphs(node):
                rewrite(sub, scope)
            if node.op_type != "MatMulInteger":
                nodes.append(node)
                continue
            index = next(counter)
            a, b_name = node.input[0], node.input[1]
            if b_name not in scope:
                raise ValueError(f"MatMulInteger {node.name}: its weight {b_name} is not an initializer")
            b = numpy_helper.to_array(scope[b_name]).astype(np.int64)
            za = node.input[2] if len(node.input) > 2 and node.input[2] else None
            zb = numpy_helper.to_array(scope[node.input[3]]).astype(np.int64) \
                if len(node.input) > 3 and node.input[3] else np.zeros((), np.int64)
            p = f"specdec_emul{index}_"
            # exact: (a - za) @ (b - zb) in int32 (MatMulInteger's own accumulator: no sum it makes overflows it)
            nodes.append(helper.make_node("Cast", [a], [p + "a32"], to=TensorProto.INT32))
            centred = p + "a32"
            if za is not None:
                nodes.append(helper.make_node("Cast", [za], [p + "za"], to=TensorProto.INT32))
                nodes.append(helper.make_node("Sub", [p + "a32", p + "za"], [p + "ac"]))
                centred = p + "ac"
            weight = const(p + "b", (b - zb).astype(np.int32))
            nodes.append(helper.make_node("MatMul", [centred, weight], [p + "exact32"]))
            total = p + "exact32"
            risky = _risky_pairs(b) if kernel == "avx2" else np.zeros(0, np.int64)
            if risky.size:
                nodes.append(helper.make_node("Cast", [a], [p + "a"], to=TensorProto.DOUBLE))
                nodes.append(helper.make_node("Cast", [p + "exact32"], [p + "exact"], to=TensorProto.DOUBLE))
                # the raw products a * b of the risky pairs, as the kernel forms them (before any zero point)
                padded = np.concatenate([b, np.zeros((1, b.shape[1]), np.int64)]) if b.shape[0] % 2 else b
                even, odd = 2 * risky, 2 * risky + 1
                k = b.shape[0]
                nodes.append(helper.make_node("Gather", [p + "a", const(p + "ie", np.minimum(even, k - 1))],
                                              [p + "ae"], axis=-1))
                nodes.append(helper.make_node("Gather", [p + "a", const(p + "io", np.minimum(odd, k - 1))],
                                              [p + "ao"], axis=-1))
                mask = (odd < k).astype(np.float64)          # a padded row (odd K) multiplies zero
                nodes.append(helper.make_node("Mul", [p + "ao", const(p + "mask", mask)], [p + "aom"]))
                if opset >= 13:
                    axes = const(p + "axes", np.array([-1], np.int64))
                    nodes.append(helper.make_node("Unsqueeze", [p + "ae", axes], [p + "ae3"]))
                    nodes.append(helper.make_node("Unsqueeze", [p + "aom", axes], [p + "ao3"]))
                else:
                    nodes.append(helper.make_node("Unsqueeze", [p + "ae"], [p + "ae3"], axes=[-1]))
                    nodes.append(helper.make_node("Unsqueeze", [p + "aom"], [p + "ao3"], axes=[-1]))
                nodes.append(helper.make_node("Mul", [p + "ae3", const(p + "be", padded[even].astype(np.float64))],
                                              [p + "pe"]))
                nodes.append(helper.make_node("Mul", [p + "ao3", const(p + "bo", padded[odd].astype(np.float64))],
                                              [p + "po"]))
                nodes.append(helper.make_node("Add", [p + "pe", p + "po"], [p + "pair"]))
                nodes.append(helper.make_node("Clip", [p + "pair", const(p + "lo", np.array(-INT16_MAX - 1.0)),
                                                       const(p + "hi", np.array(float(INT16_MAX)))], [p + "clip"]))
                nodes.append(helper.make_node("Sub", [p + "clip", p + "pair"], [p + "lost"]))
                reduce_axes = const(p + "raxes", np.array([-2], np.int64))
                if opset >= 13:
                    nodes.append(helper.make_node("ReduceSum", [p + "lost", reduce_axes], [p + "corr"], keepdims=0))
                else:
                    nodes.append(helper.make_node("ReduceSum", [p + "lost"], [p + "corr"], axes=[-2], keepdims=0))
                nodes.append(helper.make_node("Add", [p + "exact", p + "corr"], [p + "sat"]))
                total = p + "sat"
            nodes.append(helper.make_node("Identity", [total], [node.output[0]]) if total == p + "exact32" else
                         helper.make_node("Cast", [total], [node.output[0]], to=TensorProto.INT32))
        del g.node[:]
        g.node.extend(nodes)

    rewrite(graph, {})
    used = {name for n in all_nodes(graph) for name in n.input} | {o.name for o in graph.output}
    kept = [t for t in graph.initializer if t.name in used]     # the int8 weights now live as int32 copies
    del graph.initializer[:]
    graph.initializer.extend(kept + extra)
    return model


def saturable(model) -> bool:
    """Whether some MatMulInteger weight of the ONNX `model` (subgraphs included) has a pair of rows an activation
    can saturate in the avx2 kernel (`_risky_pairs`); False: its avx2 emulation is its exact one."""
    from onnx import numpy_helper

    inits = {t.name: t for t in model.graph.initializer}
    for node in all_nodes(model.graph):
        if node.op_type == "MatMulInteger" and node.input[1] in inits:
            if _risky_pairs(numpy_helper.to_array(inits[node.input[1]]).astype(np.int64)).size:
                return True
    return False


def _risky_pairs(b: np.ndarray) -> np.ndarray:
    """The pair indices j whose rows (2j, 2j+1) of int8 weights `b` [K, N] sum past PAIR_BOUND in magnitude in some
    column: the only pairs an activation in 0..255 can saturate."""
    return np.flatnonzero(pair_sums(b).max(axis=1) > PAIR_BOUND).astype(np.int64)


def save(model, out) -> None:
    """Write an emulated graph, its weights in a file beside it (int32 copies of the int8 weights can pass
    protobuf's 2 GB)."""
    import onnx
    from pathlib import Path

    out = Path(out)
    onnx.save_model(model, str(out), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=out.name + ".data", size_threshold=1024)


def all_nodes(graph):
    """Every node of an ONNX graph, those of its subgraphs (If, Loop) included, depth first."""
    for node in graph.node:
        yield node
        for sub in subgraphs(node):
            yield from all_nodes(sub)
