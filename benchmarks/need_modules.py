"""The modules a script on a machine that cannot download needs, checked before it starts (benchmarks/gpu_check.sh,
models/speech_gpu.sh): each one's version, or why it cannot be imported, in one line; onnxruntime's providers and
whether PyTorch sees a CUDA GPU where those are among them. Run from the tree's root, before specdec is installed:

    python3 -m benchmarks.need_modules torch numpy ...      # exit 1 when one is missing
"""

from __future__ import annotations

import importlib
import sys


def check(names: list, say=print) -> list:
    """The modules of `names` that cannot be imported, each reported through `say` as above."""
    missing = []
    for name in names:
        try:
            say(f"{name} {getattr(importlib.import_module(name), '__version__', '?')}")
        except Exception as err:            # not installed, or a missing shared library
            missing.append(name)
            say(f"missing: {name} ({type(err).__name__}: {err})")
    if "onnxruntime" in names and "onnxruntime" not in missing:
        say(f"providers: {importlib.import_module('onnxruntime').get_available_providers()}")
    if "torch" in names and "torch" not in missing:
        import torch

        say(f"cuda: {torch.cuda.is_available()} {torch.cuda.get_device_name() if torch.cuda.is_available() else ''}")
    return missing


if __name__ == "__main__":
    sys.exit(1 if check(sys.argv[1:]) else 0)
