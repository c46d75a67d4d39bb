"""The runtime needs only onnxruntime, numpy and tokenizers: loading and generating never imports torch,
transformers or onnx (the `pip install specdec` promise)."""

import subprocess
import sys


def test_runtime_runs_without_export_dependencies(tiny_export):
    code = (
        "import sys\n"
        "from specdec.runtime import SpeculativeDecoder\n"
        f"dec = SpeculativeDecoder.load({str(tiny_export)!r}, provider='cpu')\n"
        "dec.generate('w5 w6', max_new_tokens=4, gamma=2)\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'onnx', 'tqdm', 'scipy') if m in sys.modules)\n"
        "print(','.join(heavy))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""
