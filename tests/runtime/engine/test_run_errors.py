"""A graph that loads but fails when it runs (a corrupt but consistent export: checksums rewritten) is a one-line
SpecdecError from generate(), not an onnxruntime traceback; the decoder stays usable for requests that do not hit
the broken graph, and a good decoder in the same process is unaffected."""

from __future__ import annotations

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
    assert broken.generate(input_ids=[5, 6, 7, 1], max_new_tokens=8, gamma=0).token_ids == want
    assert good.generate(input_ids=[5, 6, 7, 1], max_new_tokens=8, gamma=2, draft="draft").token_ids == want
