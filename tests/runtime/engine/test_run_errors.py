"""A graph that loads but fails when it runs (a corrupt but consistent export: checksums rewritten) is a one-line
SpecdecError from generate(), not an onnxruntime traceback; the decoder stays usable for requests that do not hit
the broken graph, and a good decoder in the same process is unaffected."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdec.runtime import SpecdecError, SpeculativeDecoder
from specdec.runtime.core.errors import RunFailed
from tinymodels import failing_at_run_time


def test_a_graph_that_fails_at_run_time_is_a_one_line_error(tiny_export, tmp_path):
    bad = failing_at_run_time(tiny_export, tmp_path / "bad")
    good = SpeculativeDecoder.load(tiny_export, provider="cpu")
    want = good.generate(input_ids=[5, 6, 7, 1], max_new_tokens=8, gamma=0).token_ids
    broken = SpeculativeDecoder.load(bad, provider="cpu")            # it loads: only running it fails
    with pytest.raises(RunFailed) as err:            # a SpecdecError; the C API's SPECDEC_E_RUNTIME
        broken.generate(input_ids=[5, 6, 7, 1], max_new_tokens=8, gamma=2, draft="draft")
    message = str(err.value)
    assert isinstance(err.value, SpecdecError)
    assert message.startswith("onnxruntime failed running a graph of this export") and "\n" not in message
    # the failing node and onnxruntime's reason, not the If and Loop nodes it sits in (the bias table's Gather)
    assert "Gather node '" in message and "out of data bounds" in message and "Status Message" not in message
    assert broken.generate(input_ids=[5, 6, 7, 1], max_new_tokens=8, gamma=0).token_ids == want
    assert good.generate(input_ids=[5, 6, 7, 1], max_new_tokens=8, gamma=2, draft="draft").token_ids == want


def test_a_graph_onnxruntime_cannot_load_names_what_it_said_in_one_line(tiny_export, tmp_path):
    """A graph of an IR version this onnxruntime does not load (as an onnxruntime before 1.32 meets a graph written
    with IR 14): the one-line error quotes onnxruntime's reason, not its C++ location, and names the fix."""
    import json
    import shutil

    import onnx

    from specdec.runtime.loading.manifest import sha256_file

    bad = Path(shutil.copytree(tiny_export, tmp_path / "bad"))
    path = bad / "draft" / "decoder.onnx"
    model = onnx.load(str(path))
    model.ir_version = 99
    onnx.save(model, str(path))
    manifest = json.loads((bad / "manifest.json").read_text())
    manifest["files"] = {rel: sha256_file(bad / rel) for rel in manifest["files"]}
    (bad / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SpecdecError) as err:
        SpeculativeDecoder.load(bad, provider="cpu")
    message = str(err.value)
    assert "\n" not in message and "decoder.onnx" in message and "specdec-export" in message
    assert "Unsupported model IR version: 99" in message and ".cc:" not in message and "ONNXRuntimeError" not in message
