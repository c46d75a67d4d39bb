"""specdec-export's command line: progress per stage, and bad input as one `error:` line with exit status 2."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tinymodels import make_tiny_t5, read_manifest, run_export_cli, tiny_t5_config


def assert_one_line_error(code, stdout, stderr, *needles):
    assert code == 2, (code, stdout, stderr)
    assert "Traceback" not in stderr and "Traceback" not in stdout
    assert "\r" not in stderr, f"progress-bar output around the error: {stderr!r}"
    lines = stderr.split("\n")
    assert len(lines) == 2 and lines[1] == "", f"expected exactly one line on stderr, got {stderr!r}"
    line = lines[0]
    assert line.startswith("error: "), line
    for needle in needles:
        assert needle.lower() in line.lower(), (needle, line)
    return line


def export_args(target, draft, out, *extra):
    return ["--target", target, "--draft", draft, "--export", out, "--max-length", "32", *extra]


# --- progress ------------------------------------------------------------------------------------------------

def test_progress_names_every_stage_for_each_model(tiny_export_log, tiny_pair):
    stdout, _ = tiny_export_log
    for role in ("target", "draft"):
        for stage in ("load", "encoder", "decoder", "check"):
            assert re.search(rf"^\s*{role}\s+{stage}\s+\d+\.\d+ s$", stdout, re.M), (role, stage, stdout)
        assert re.search(rf"^\s*{role} parity vs PyTorch float64 \(fp32\):.*argmax agrees on \d+/\d+ positions -> OK$", stdout, re.M), stdout
    for stage in ("tokenizer", "manifest", "open"):
        assert re.search(rf"^\s*pair\s+{stage}\s+\d+\.\d+ s$", stdout, re.M), (stage, stdout)
    # stages come in pipeline order
    order = [m.group(1) for m in re.finditer(r"^\s*(?:target|draft|pair)\s+(\w+)\s+\d", stdout, re.M)]
    assert order == ["load", "load", "encoder", "decoder", "encoder", "decoder", "tokenizer",
                     "check", "check", "manifest", "open"], order
    assert f"(target) + {tiny_pair[1]} (draft)" in stdout


# --- bad options ---------------------------------------------------------------------------------------------

def test_gamma_max_zero(tiny_pair, tmp_path):
    out = tmp_path / "out"
    line = assert_one_line_error(*run_export_cli(export_args(*tiny_pair, out, "--gamma-max", "0")),
                                 "--gamma-max", "must be in 1..128", "got 0")
    assert not out.exists(), line


def test_max_length_without_room_for_verification(tiny_pair, tmp_path):
    assert_one_line_error(*run_export_cli(["--target", tiny_pair[0], "--draft", tiny_pair[1], "--export",
                                           tmp_path / "out", "--gamma-max", "8", "--max-length", "9"]),
                          "--max-length 9", "gamma_max 8")


def test_draft_without_target(tiny_pair, tmp_path):
    assert_one_line_error(*run_export_cli(["--draft", tiny_pair[1], "--export", tmp_path / "out"]),
                          "--draft needs --target")


# --- bad models ----------------------------------------------------------------------------------------------

def test_unknown_model_id_without_network(tiny_pair, tmp_path, monkeypatch, offline_hub_factory):
    monkeypatch.chdir(tmp_path)
    cache = offline_hub_factory(tmp_path / "empty-hub-cache")
    line = assert_one_line_error(*run_export_cli(export_args("nobody-here/no-such-t5", tiny_pair[1], "out")),
                                 "'nobody-here/no-such-t5'", "could not be found", "HF_HUB_OFFLINE",
                                 "local checkpoint directory")
    assert "--target ./" in line                       # shows what a local path looks like
    assert not (tmp_path / "out").exists()
    assert not any(cache.iterdir()), "something was written to the hub cache"
    assert offline_hub_factory.connections == []


def write_foreign_config(path: Path, kind: str) -> Path:
    from transformers import BartConfig, GPT2Config

    cfg = {"bart": lambda: BartConfig(vocab_size=48, d_model=16, encoder_layers=1, decoder_layers=1,
                                      encoder_attention_heads=2, decoder_attention_heads=2),
           "gpt2": lambda: GPT2Config(vocab_size=48, n_embd=16, n_layer=1, n_head=2)}[kind]()
    cfg.save_pretrained(str(path))
    return path


@pytest.mark.parametrize("kind,role", [("bart", "target"), ("gpt2", "target"), ("bart", "draft")])
def test_non_t5_architecture(tiny_pair, tmp_path, kind, role):
    foreign = write_foreign_config(tmp_path / kind, kind)
    target, draft = (foreign, tiny_pair[1]) if role == "target" else (tiny_pair[0], foreign)
    line = assert_one_line_error(*run_export_cli(export_args(target, draft, tmp_path / "out")),
                                 f"'{kind}' model", "supported are", "T5 v1.0", "v1.1", "mT5")
    assert str(foreign) in line
    assert not (tmp_path / "out").exists()


def test_vocabulary_size_mismatch(tiny_pair, tmp_path):
    other = tmp_path / "draft56"
    tiny_t5_config(vocab=56, d_model=16, heads=2, layers=1, decoder_layers=1).save_pretrained(str(other))
    assert_one_line_error(*run_export_cli(export_args(tiny_pair[0], other, tmp_path / "out")),
                          "vocabulary size 56", "has 48", str(other))
    assert not (tmp_path / "out").exists()


def test_a_second_draft_without_a_name_is_refused(tiny_pair, tmp_path):
    """Only the first --draft may be unnamed (it is "draft"); a second unnamed one would get a name nobody chose."""
    assert_one_line_error(*run_export_cli(export_args(*tiny_pair, tmp_path / "out", "--draft", str(tiny_pair[1]))),
                          "second draft without a name", "--draft NAME=CHECKPOINT")
    assert not (tmp_path / "out").exists()


def test_same_size_but_different_vocabulary(tiny_pair, tmp_path):
    """Same vocab_size, different tokens: only the tokenizers tell, and that check runs after loading."""
    words = {tok: i for i, tok in enumerate(("<pad>", "</s>", "<unk>"))}
    words.update({f"x{i}": i for i in range(3, 48)})
    other = make_tiny_t5(tmp_path / "other-vocab", d_model=16, heads=2, layers=1, decoder_layers=1, v11=True,
                         seed=5, tokenizer_words=words)
    assert_one_line_error(*run_export_cli(export_args(tiny_pair[0], other, tmp_path / "out")),
                          "tokenizers", "differ", "vocabulary")


def test_a_tokenizer_with_more_ids_than_the_models_rows(tiny_pair, tmp_path):
    """Fewer ids than rows is the real T5 layout (tiny_pair has it); more would reach past the embedding."""
    big = make_tiny_t5(tmp_path / "big-tokenizer", vocab=48, tokens=56, d_model=16, heads=2, layers=1,
                       decoder_layers=1, v11=True, seed=5)
    assert_one_line_error(*run_export_cli(export_args(big, tiny_pair[1], tmp_path / "out")),
                          "makes ids up to 55", "48 vocabulary rows", "the model's own tokenizer")
    assert not (tmp_path / "out").exists()


def test_an_export_that_would_not_load_is_one_line_and_leaves_nothing(tiny_pair, tmp_path, monkeypatch):
    """The export's last step opens what it wrote as SpeculativeDecoder.load does. Built with the datastore over the
    model's 48 rows instead of the tokenizer's 40 ids (how exports of padded vocabularies, every real T5, used to
    be written: they succeeded and then did not load), the export fails in one line and leaves no directory."""
    import specdec.runtime.tools.datastore_build as datastore_build

    text = tmp_path / "text.txt"
    text.write_text("w5 w6 w7\nw8 w9\n")
    out = tmp_path / "out"
    assert run_export_cli(export_args(*tiny_pair, out, "--datastore-text", text))[0] == 0
    shutil.rmtree(out)
    monkeypatch.setattr(datastore_build, "tokenizer_size", lambda tokenizer: 48)
    assert_one_line_error(*run_export_cli(export_args(*tiny_pair, out, "--datastore-text", text)),
                          "written but does not load", "tokenizer of 48 ids", "makes 40", "report it")
    assert not out.exists()


# --- the output directory ------------------------------------------------------------------------------------

def test_existing_output_directory_without_force(tiny_pair, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert_one_line_error(*run_export_cli(export_args(*tiny_pair, out)), f"'{out}'", "already exists", "--force")
    assert (out / "keep.txt").read_text() == "mine"


def test_force_does_not_delete_a_directory_that_is_not_an_export(tiny_pair, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert_one_line_error(*run_export_cli(export_args(*tiny_pair, out, "--force")), "not a specdec export")
    assert (out / "keep.txt").read_text() == "mine"


def test_force_replaces_an_earlier_export(tiny_pair, tiny_export, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(tiny_export, out)
    (out / "stale.txt").write_text("from before")
    (out / "target" / "stale.onnx").write_bytes(b"old")
    before = read_manifest(out)
    assert before["gamma_max"] == 8

    code, stdout, stderr = run_export_cli(export_args(*tiny_pair, out, "--gamma-max", "3", "--force"))
    assert code == 0, stderr
    assert not (out / "stale.txt").exists() and not (out / "target" / "stale.onnx").exists()
    after = read_manifest(out)
    assert (after["gamma_max"], after["max_length"]) == (3, 32)
    assert "stale.txt" not in after["files"]

    from specdec.runtime.loading.manifest import load_manifest
    assert load_manifest(out).gamma_max == 3


@pytest.mark.parametrize("where", ["under-a-file", "proc"])
def test_unwritable_output_directory(tiny_pair, tmp_path, where):
    """Tests run as root, so permissions stop nothing: a path under a regular file, or inside /proc, cannot be
    created by anyone."""
    if where == "under-a-file":
        blocker = tmp_path / "file.txt"
        blocker.write_text("a file, not a directory")
        out = blocker / "sub"
    else:
        out = Path("/proc") / f"specdec-export-test-{os.getpid()}"
    line = assert_one_line_error(*run_export_cli(export_args(*tiny_pair, out)),
                                 f"output directory '{out}' is not writable", "choose an --export directory")
    assert not out.exists()
    if where == "under-a-file":
        assert "not a directory" in line.lower()
        assert blocker.read_text() == "a file, not a directory"


def test_console_entry_point_exits_2_with_one_line(tiny_pair, tmp_path):
    """The real process: no traceback, no warnings, just the error line (python -m specdec.export.cli)."""
    proc = subprocess.run([sys.executable, "-m", "specdec.export.cli", *map(str, export_args(
        *tiny_pair, tmp_path / "out", "--gamma-max", "0"))], capture_output=True, text=True, timeout=120,
        cwd=tmp_path, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert_one_line_error(proc.returncode, proc.stdout, proc.stderr, "--gamma-max")

