"""specdec-export --target alone: an export with no draft model, for either family, that decodes with the draft
sources needing no model (the lookup); and int8 Whisper exports, checked as int8 T5 ones are (both CPU kernels)."""

from __future__ import annotations

import pytest

from tinymodels import (build_whisper_pair, make_tiny_t5, random_prompts, read_manifest, run_export_cli,
                        whisper_audio)

from specdec.runtime import SpeculativeDecoder
from specdec.runtime.core.errors import SpecdecError


def one_line(code, stderr):
    return code == 2 and stderr.count("\n") == 1 and "Traceback" not in stderr and stderr.startswith("error: ")


@pytest.fixture(scope="module")
def t5_alone(tmp_path_factory):
    root = tmp_path_factory.mktemp("t5-alone")
    target = make_tiny_t5(root / "target", seed=0)
    code, stdout, stderr = run_export_cli(["--target", target, "--export", root / "export", "--max-length", "48"])
    assert code == 0, stderr
    return root / "export", stdout


def test_a_target_alone_exports_with_no_draft_model(t5_alone):
    out, stdout = t5_alone
    assert set(read_manifest(out)["models"]) == {"target"}
    assert "with no draft model" in stdout and "draft  load" not in stdout


def test_a_target_alone_decodes_greedy_exactly_with_the_lookup(t5_alone):
    decoder = SpeculativeDecoder.load(t5_alone[0], provider="cpu", threads=1)
    assert decoder.draft is None and decoder.models == {}
    for prompt in random_prompts(48, 6, seed=3):
        alone = decoder.generate(input_ids=prompt, draft="none", max_new_tokens=24).token_ids
        for draft in ("auto", "lookup"):
            assert decoder.generate(input_ids=prompt, draft=draft, max_new_tokens=24).token_ids == alone, draft


def test_asking_a_target_alone_for_a_draft_model_is_one_line_and_the_decoder_goes_on(t5_alone):
    decoder = SpeculativeDecoder.load(t5_alone[0], provider="cpu", threads=1)
    for draft in ("draft", "lookup,draft"):
        with pytest.raises(SpecdecError) as err:
            decoder.generate(input_ids=[5, 6, 7, 1], draft=draft, max_new_tokens=4)
        text = str(err.value)
        assert "\n" not in text and "this export has no draft model" in text and "--draft CHECKPOINT" in text, text
    assert decoder.generate(input_ids=[5, 6, 7, 1], max_new_tokens=4).token_ids


def test_a_draft_without_a_target_is_one_line(tmp_path):
    draft = make_tiny_t5(tmp_path / "draft", seed=1, layers=1, decoder_layers=1)
    code, _, stderr = run_export_cli(["--draft", draft, "--export", tmp_path / "out"])
    assert one_line(code, stderr) and "--draft needs --target" in stderr, stderr
    assert not (tmp_path / "out").exists()


# -- int8 Whisper ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def whisper_int8(tmp_path_factory):
    root = tmp_path_factory.mktemp("whisper-int8")
    build_whisper_pair(root, vocab=40, seed=6, tokens=36)
    runs = {}
    for name, extra in (("alone", []), ("pair", ["--draft", root / "draft"])):
        code, stdout, stderr = run_export_cli(["--target", root / "target", "--export", root / name, "--dtype", "int8",
                                               "--gamma-max", "4", "--max-length", "64", *extra])
        assert code == 0, stderr
        runs[name] = (root / name, stdout)
    return runs


def test_an_int8_whisper_is_checked_as_both_cpu_kernels_compute_it(whisper_int8):
    out, stdout = whisper_int8["alone"]
    for cpus in ("CPUs with VNNI and ARM64", "x86 CPUs without VNNI"):
        assert f"target as {cpus} compute it:" in stdout, stdout
    quantization = read_manifest(out)["models"]["target"]["quantization"]
    assert set(quantization) == {"encoder"}              # a Whisper decoder stays fp32 (WhisperFamily.int8_stages)
    assert quantization["encoder"]["weight_scales"] == "pairs"
    assert quantization["encoder"]["max_pair_sum"] <= quantization["encoder"]["pair_bound"]
    import onnx

    encoder = onnx.load(str(out / "target" / "encoder.onnx"))
    ops = [n.op_type for n in encoder.graph.node]
    assert "MatMulInteger" in ops and "Conv" in ops       # the blocks in int8, the front end and convolutions not
    decoder = onnx.load(str(out / "target" / "decoder.onnx"))
    assert "MatMulInteger" not in [n.op_type for n in decoder.graph.node]


def test_an_int8_whisper_decodes_its_own_greedy_output_with_any_draft(whisper_int8):
    alone = SpeculativeDecoder.load(whisper_int8["alone"][0], provider="cpu", threads=1)
    pair = SpeculativeDecoder.load(whisper_int8["pair"][0], provider="cpu", threads=1)
    for seed in range(4):
        audio = whisper_audio(0.9, seed=seed)
        own = alone.generate(audio=audio, draft="none", max_new_tokens=30).token_ids
        assert alone.generate(audio=audio, draft="auto", max_new_tokens=30).token_ids == own
        for draft in ("draft", "auto", "lookup,draft"):
            assert pair.generate(audio=audio, draft=draft, max_new_tokens=30).token_ids == own, (seed, draft)


def test_an_fp16_whisper_is_refused_in_one_line(tmp_path):
    build_whisper_pair(tmp_path, vocab=40, seed=6, tokens=36)
    code, _, stderr = run_export_cli(["--target", tmp_path / "target", "--export", tmp_path / "out", "--dtype", "fp16"])
    assert one_line(code, stderr) and "fp32 or int8" in stderr and "--dtype int8" in stderr, stderr
