"""provider="auto" resolved against a given list of onnxruntime providers: CUDA, then the CPU; TensorRT only when
named (no TensorRT run has been recorded)."""

import pytest

from specdec.runtime import SpecdecError
from specdec.runtime.engine.device import PROVIDER_HELP, resolve_provider

CPU, CUDA, TRT = "CPUExecutionProvider", "CUDAExecutionProvider", "TensorrtExecutionProvider"


@pytest.mark.parametrize("available, chosen", [
    ([TRT, CUDA, CPU], "cuda"),         # TensorRT present: auto still takes CUDA
    ([CUDA, CPU], "cuda"),
    ([TRT, CPU], "cpu"),                # TensorRT without CUDA: the CPU, never TensorRT
    ([CPU], "cpu"),
])
def test_auto_tries_cuda_then_cpu(available, chosen):
    assert resolve_provider("auto", available) == chosen


def test_tensorrt_only_when_named():
    assert resolve_provider("tensorrt", [TRT, CUDA, CPU]) == "tensorrt"
    with pytest.raises(SpecdecError, match="provider 'tensorrt' is not available"):
        resolve_provider("tensorrt", [CUDA, CPU])


def test_explicit_cuda_unavailable_is_an_error():
    with pytest.raises(SpecdecError, match="provider 'cuda' is not available"):
        resolve_provider("cuda", [CPU])


def test_help_says_the_order():
    assert "auto: CUDA if this onnxruntime has it, else the CPU" in PROVIDER_HELP
    assert "TensorRT only when named" in PROVIDER_HELP
