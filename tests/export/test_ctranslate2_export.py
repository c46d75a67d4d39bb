"""specdec-export --target on a CTranslate2 / faster-whisper folder: the folder that faster-whisper's users have,
made here by ctranslate2's own converter from a tiny random transformers Whisper, exports what the transformers
folder exports (the same speech entry, the same greedy tokens), alone or with a draft (a folder of its own too);
an int8 folder is one line."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("ctranslate2", reason="CTranslate2 folders are made by the ctranslate2 package "
                    "(pip install 'specdec[bench]')")

from tinymodels import build_whisper_pair, read_manifest, run_export_cli, whisper_audio  # noqa: E402

from specdec.runtime import SpeculativeDecoder  # noqa: E402


def ct2_folder(hf_dir, out, quantization=None):
    """ctranslate2's converter with the files faster-whisper's folders carry; the languages written back as the
    published folders have them (under transformers 5 the converter writes lang_ids [])."""
    from ctranslate2.converters import TransformersConverter

    TransformersConverter(str(hf_dir), copy_files=["tokenizer.json", "preprocessor_config.json"]).convert(
        str(out), quantization=quantization, force=True)
    config = json.loads((out / "config.json").read_text())
    generation = json.loads((hf_dir / "generation_config.json").read_text())
    config["lang_ids"] = sorted(generation["lang_to_id"].values())
    (out / "config.json").write_text(json.dumps(config))
    return out


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    root = tmp_path_factory.mktemp("ct2-export")
    build_whisper_pair(root, vocab=40, seed=6, tokens=36)
    ct2 = ct2_folder(root / "target", root / "faster-whisper")
    draft = ct2_folder(root / "draft", root / "faster-whisper-draft")
    runs = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECDEC_CACHE", str(root / "cache"))
        for name, argv in (("hf", ["--target", root / "target"]), ("ct2", ["--target", ct2]),
                           ("ct2-pair", ["--target", ct2, "--draft", draft])):
            code, stdout, stderr = run_export_cli([*argv, "--export", root / f"export-{name}", "--gamma-max", "4",
                                                   "--max-length", "64"])
            assert code == 0, stderr
            runs[name] = (root / f"export-{name}", stdout)
    return root, runs


def test_a_ctranslate2_folder_exports_as_its_transformers_original(exports):
    root, runs = exports
    out, stdout = runs["ct2"]
    assert "a CTranslate2 / faster-whisper Whisper folder, read as the transformers checkpoint" in stdout
    assert "-> OK" in stdout
    ours, theirs = read_manifest(out), read_manifest(runs["hf"][0])
    assert ours["models"]["target"]["source"] == str(root / "faster-whisper")
    # languages, tasks, suppressed tokens, window; ctranslate2's converter names the rows past the tokenizer's 36 ids
    # as timestamp tokens (as OpenAI's vocabularies have them), so the folder has the timestamps the original lacks
    assert ours["speech"]["timestamps"] == {"begin": 36, "count": 4} and theirs["speech"]["timestamps"] is None
    assert {**ours["speech"], "timestamps": None} == theirs["speech"]
    assert ours["models"]["target"]["architecture"] == theirs["models"]["target"]["architecture"]


def test_its_greedy_output_is_the_transformers_originals(exports):
    _, runs = exports
    decoders = {name: SpeculativeDecoder.load(runs[name][0], provider="cpu", threads=1) for name in runs}
    for seed in range(4):
        audio = whisper_audio(0.9, seed=seed)
        want = decoders["hf"].generate(audio=audio, language="en", draft="none", max_new_tokens=30).token_ids
        assert decoders["ct2"].generate(audio=audio, language="en", draft="none", max_new_tokens=30).token_ids == want
        for draft in ("draft", "auto"):
            got = decoders["ct2-pair"].generate(audio=audio, language="en", draft=draft, max_new_tokens=30)
            assert got.token_ids == want, (seed, draft)


def test_an_int8_folder_is_one_line(exports, tmp_path, monkeypatch):
    root, _ = exports
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    folder = ct2_folder(root / "target", tmp_path / "int8", "int8")
    code, _, stderr = run_export_cli(["--target", folder, "--export", tmp_path / "out"])
    assert code == 2 and stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
    assert "holds int8 weights" in stderr and "float16/float32" in stderr
    assert not (tmp_path / "out").exists()
