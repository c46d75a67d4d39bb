"""Bad input: a one-line SpecdecError naming the problem and the fix, and the decoder still works afterwards."""

import json
import shutil
import subprocess
import sys

import pytest

from specdec.runtime import SpecdecError, SpeculativeDecoder

from tinymodels import make_tiny_t5, run_export_cli


@pytest.fixture(scope="module")
def decoder(tiny_export):
    return SpeculativeDecoder.load(tiny_export, provider="cpu")


@pytest.fixture(scope="module")
def reference(decoder):
    return decoder.generate(input_ids=[5, 6, 7, 1], max_new_tokens=10, gamma=3).token_ids


BAD_CALLS = {
    "gamma above gamma_max": (dict(input_ids=[5, 1], gamma=9), "gamma must be an integer in 0..8"),
    "negative gamma": (dict(input_ids=[5, 1], gamma=-1), "gamma must be"),
    "temperature < 0": (dict(input_ids=[5, 1], temperature=-0.5), "temperature must be"),
    "temperature nan": (dict(input_ids=[5, 1], temperature=float("nan")), "temperature must be"),
    "top_p = 0": (dict(input_ids=[5, 1], top_p=0.0), "top_p must be in (0, 1]"),
    "top_p > 1": (dict(input_ids=[5, 1], top_p=1.5), "top_p must be in (0, 1]"),
    "lenience = 0": (dict(input_ids=[5, 1], lenience=0.0), "lenience must be in (0, 1]"),
    "lenience > 1": (dict(input_ids=[5, 1], lenience=1.2), "lenience must be in (0, 1]"),
    "negative top_k": (dict(input_ids=[5, 1], top_k=-1), "top_k must be"),
    "max_new_tokens 0": (dict(input_ids=[5, 1], max_new_tokens=0), "max_new_tokens must be"),
    "empty prompt": (dict(prompt=""), "the prompt is empty"),
    "blank prompt": (dict(prompt="   "), "the prompt is empty"),
    "empty input_ids": (dict(input_ids=[]), "input_ids is empty"),
    "token id = vocab": (dict(input_ids=[5, 48, 1]), "outside the vocabulary 0..47"),
    "negative token id": (dict(input_ids=[-1, 1]), "outside the vocabulary"),
    "prompt and ids": (dict(prompt="w5", input_ids=[5, 1]), "exactly one of"),
    "prompt too long": (dict(input_ids=[5] * 65), "longer than max_length 64"),
    "text prompt too long": (dict(prompt="w5 " * 80), "longer than max_length 64"),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_bad_request_is_one_line_and_decoder_survives(case, decoder, reference):
    kwargs, message = BAD_CALLS[case]
    prompt = kwargs.pop("prompt", None)
    with pytest.raises(SpecdecError) as err:
        decoder.generate(prompt, **kwargs)
    text = str(err.value)
    assert message in text
    assert "\n" not in text
    assert decoder.generate(input_ids=[5, 6, 7, 1], max_new_tokens=10, gamma=3).token_ids == reference
    with pytest.raises(SpecdecError):
        list(decoder.stream(prompt, **kwargs))     # the stream form checks before yielding anything


def copy_export(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_missing_export_directory(tmp_path):
    with pytest.raises(SpecdecError, match="does not exist"):
        SpeculativeDecoder.load(tmp_path / "nowhere")


def test_directory_without_manifest(tmp_path):
    with pytest.raises(SpecdecError, match="no manifest.json"):
        SpeculativeDecoder.load(tmp_path)


def test_missing_export_file(tiny_export, tmp_path):
    broken = copy_export(tiny_export, tmp_path / "e")
    (broken / "draft" / "decoder.onnx").unlink()
    with pytest.raises(SpecdecError, match="'draft/decoder.onnx' is missing"):
        SpeculativeDecoder.load(broken)


def test_modified_export_file_fails_its_checksum(tiny_export, tmp_path):
    broken = copy_export(tiny_export, tmp_path / "e")
    with open(broken / "target" / "decoder.onnx", "r+b") as fh:
        fh.seek(200)
        byte = fh.read(1)
        fh.seek(200)
        fh.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(SpecdecError, match="does not match its sha256"):
        SpeculativeDecoder.load(broken)


def test_corrupt_manifest(tiny_export, tmp_path):
    broken = copy_export(tiny_export, tmp_path / "e")
    (broken / "manifest.json").write_text("{not json")
    with pytest.raises(SpecdecError, match="corrupt"):
        SpeculativeDecoder.load(broken)
    manifest = json.loads((tiny_export / "manifest.json").read_text())
    del manifest["models"]["target"]          # every export has a target (a draft it may lack: --target alone)
    (broken / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SpecdecError, match="malformed"):
        SpeculativeDecoder.load(broken)


def test_draft_export_from_another_pair_is_refused(tiny_export, tmp_path):
    words = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{f"v{i}": i for i in range(3, 48)}}   # same size, other tokens
    target = make_tiny_t5(tmp_path / "t", tokenizer_words=words, seed=7)
    draft = make_tiny_t5(tmp_path / "d", tokenizer_words=words, d_model=16, layers=1, decoder_layers=1, seed=8)
    code, _, err = run_export_cli(["--target", target, "--draft", draft, "--export", tmp_path / "other",
                                   "--gamma-max", "8", "--max-length", "64"])
    assert code == 0, err
    with pytest.raises(SpecdecError, match="does not belong with target export"):
        SpeculativeDecoder.load(tiny_export, draft=tmp_path / "other")
    # a draft export that does belong (the same export) is accepted
    dec = SpeculativeDecoder.load(tiny_export, draft=tiny_export)
    assert dec.generate(input_ids=[5, 6, 1], max_new_tokens=4, gamma=2).token_ids


def test_unknown_provider():
    from specdec.runtime.engine.device import resolve_provider
    with pytest.raises(SpecdecError, match="unknown provider"):
        resolve_provider("tpu")


def test_cli_errors_are_one_line(tiny_export, tmp_path):
    for args in (["--export", str(tmp_path / "none"), "w5"], ["--export", str(tiny_export), "--gamma", "20", "w5"],
                 ["--export", str(tiny_export), "--top-p", "0", "w5"], ["--export", str(tiny_export), ""]):
        proc = subprocess.run([sys.executable, "-m", "specdec.runtime.tools.generate", *args], capture_output=True, text=True)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in proc.stderr


def test_cli_prints_output_and_stats(tiny_export):
    proc = subprocess.run([sys.executable, "-m", "specdec.runtime.tools.generate", "--export", str(tiny_export), "--provider",
                           "cpu", "--max-new-tokens", "6", "--gamma", "3", "w5 w6"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith("w")
    assert "kept/proposed" in proc.stderr and "tokens/target call" in proc.stderr
    streamed = subprocess.run([sys.executable, "-m", "specdec.runtime.tools.generate", "--export", str(tiny_export), "--provider",
                               "cpu", "--max-new-tokens", "6", "--gamma", "3", "--stream", "w5 w6"],
                              capture_output=True, text=True)
    assert streamed.returncode == 0, streamed.stderr
    assert streamed.stdout == proc.stdout
    assert "6 tokens" in streamed.stderr and "kept/proposed" in streamed.stderr
    proc = subprocess.run([sys.executable, "-m", "specdec.runtime.tools.generate", "--export", str(tiny_export), "--json",
                           "--max-new-tokens", "6", "w5 w6"], capture_output=True, text=True)
    out = json.loads(proc.stdout)
    dec = SpeculativeDecoder.load(tiny_export, provider="cpu")
    assert out["token_ids"] == dec.generate("w5 w6", max_new_tokens=6, gamma=4).token_ids
    assert {"target_calls", "draft_calls", "acceptance_rate", "host_s"} <= set(out["stats"])
