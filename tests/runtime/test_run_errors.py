"""A graph that loads but fails when it runs (a corrupt but consistent export: checksums rewritten) is a one-line
SpecdecError from generate(), not an onnxruntime traceback; the decoder stays usable for requests that do not hit
the broken graph, and a good decoder in the same process is unaffected."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from specdec.runtime import SpecdecError, SpeculativeDecoder
from specdec.runtime.loading.manifest import sha256_file


def all_nodes(graph):
    """The graph's nodes and those of its subgraphs (a draft's decoder is an If over its proposal loop)."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == attr.GRAPH else list(attr.graphs)):
                yield from all_nodes(sub)


def test_a_graph_that_fails_at_run_time_is_a_one_line_error(tiny_export, tmp_path):
    import onnx
    from onnx import numpy_helper

    bad = tmp_path / "bad"
    shutil.copytree(tiny_export, bad)
    path = bad / "draft" / "decoder.onnx"
    model = onnx.load(str(path))
    # the decoder's relative-position bias table [max_distance + 2, heads] (export/decoder.py bias_table) cut to 2
    # rows: the row indices are computed at run time, so loading succeeds and the lookup fails once a query is a
    # distance of 1 or more from a key (a row past row 1)
    tables = {n.input[0] for n in all_nodes(model.graph) if n.op_type == "Gather"}
    init = next(i for i in model.graph.initializer if i.name in tables and i.name == "bias_table")
    value = numpy_helper.to_array(init)
    init.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(value[:2]), init.name))
    onnx.save(model, str(path))
    manifest = json.loads((bad / "manifest.json").read_text())
    for rel in manifest["files"]:
        manifest["files"][rel] = sha256_file(bad / rel)
    (bad / "manifest.json").write_text(json.dumps(manifest))

    good = SpeculativeDecoder.load(tiny_export, provider="cpu")
    want = good.generate(input_ids=[5, 6, 7, 1], max_new_tokens=8, gamma=0).token_ids
    broken = SpeculativeDecoder.load(bad, provider="cpu")            # it loads: only running it fails
    with pytest.raises(SpecdecError) as err:
        broken.generate(input_ids=[5, 6, 7, 1], max_new_tokens=8, gamma=2, draft="draft")
    message = str(err.value)
    assert message.startswith("onnxruntime failed running a graph of this export") and "\n" not in message
    assert broken.generate(input_ids=[5, 6, 7, 1], max_new_tokens=8, gamma=0).token_ids == want
    assert good.generate(input_ids=[5, 6, 7, 1], max_new_tokens=8, gamma=2, draft="draft").token_ids == want
