"""specdec-export's --max-length: left out, the models' own decoder positions when they have learned ones (Whisper's
448, the speech pair's 224), else the default (T5); given past those positions, one line naming the limit."""

from __future__ import annotations

import pytest

from tinymodels import (WHISPER_WINDOW, export_pair, make_tiny_t5, noisy_whisper_draft, read_manifest,
                        run_export_cli, save_tiny_whisper, tiny_whisper_model)

from specdec.export.pipeline import DEFAULT_MAX_LENGTH

POSITIONS = 40          # the tiny Whisper's decoder positions: fewer than the default
MORE = 300              # and more than it (Whisper has 448)


@pytest.fixture(scope="module")
def short_whisper(tmp_path_factory):
    root = tmp_path_factory.mktemp("short-whisper")
    target = tiny_whisper_model(seed=3, vocab=40, position_scale=1.0, init_std=0.2, max_target_positions=POSITIONS,
                                **WHISPER_WINDOW)
    save_tiny_whisper(target, root / "target", 36)
    save_tiny_whisper(noisy_whisper_draft(target, 0.3, 4), root / "draft", 36)
    return root


def test_without_max_length_a_whisper_takes_its_own_positions(short_whisper, tmp_path):
    assert POSITIONS < DEFAULT_MAX_LENGTH
    out = export_pair(short_whisper / "target", short_whisper / "draft", tmp_path / "out", "--gamma-max", "4")
    assert read_manifest(out)["max_length"] == POSITIONS


def test_without_max_length_a_whisper_with_more_positions_than_the_default_takes_them_all(tmp_path):
    assert MORE > DEFAULT_MAX_LENGTH
    target = tiny_whisper_model(seed=3, vocab=40, position_scale=1.0, init_std=0.2, max_target_positions=MORE,
                                **WHISPER_WINDOW)
    save_tiny_whisper(target, tmp_path / "target", 36)
    code, stdout, stderr = run_export_cli(["--target", tmp_path / "target", "--export", tmp_path / "out",
                                           "--gamma-max", "4"])
    assert code == 0, stderr
    assert read_manifest(tmp_path / "out")["max_length"] == MORE


def test_a_max_length_past_the_positions_is_one_line(short_whisper, tmp_path):
    code, _, stderr = run_export_cli(["--target", short_whisper / "target", "--draft", short_whisper / "draft",
                                      "--export", tmp_path / "out", "--max-length", str(POSITIONS + 1)])
    assert code == 2 and stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
    assert f"--max-length {POSITIONS + 1} is more than the {POSITIONS} decoder positions" in stderr
    assert f"use --max-length {POSITIONS} or less, or leave it out" in stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flags, words", [
    (["--max-length", "65537"], "--max-length 65537 is more than an export holds (65536); use --max-length 65536"),
    (["--max-length", "100000"], "--max-length 100000 is more than an export holds"),
    (["--gamma-max", "129", "--max-length", "1024"], "--gamma-max must be in 1..128 (got 129)"),
])
def test_what_a_manifest_cannot_hold_is_refused_before_the_export(tmp_path, flags, words):
    """A T5 pair has no position limit of its own: the limits an export's manifest holds (max_length up to 65536,
    gamma_max up to 128) are checked before anything is exported, not by the load after it."""
    target, draft = make_tiny_t5(tmp_path / "t", seed=0), make_tiny_t5(tmp_path / "d", seed=1, layers=1,
                                                                         decoder_layers=1)
    code, stdout, stderr = run_export_cli(["--target", target, "--draft", draft, "--export", tmp_path / "out", *flags])
    assert code == 2 and stderr.count("\n") == 1 and words in stderr, stderr
    assert "load" not in stdout and not (tmp_path / "out").exists()


def test_without_max_length_a_t5_takes_the_default(tmp_path):
    """T5 has relative positions, no limit: the default applies."""
    target, draft = make_tiny_t5(tmp_path / "t", seed=0), make_tiny_t5(tmp_path / "d", seed=1, layers=1,
                                                                         decoder_layers=1)
    out = export_pair(target, draft, tmp_path / "out", "--gamma-max", "3")
    assert read_manifest(out)["max_length"] == DEFAULT_MAX_LENGTH


def test_the_help_says_the_default():
    from specdec.export.cli import parser

    text = " ".join(parser().format_help().split())
    assert "(default: the models' own decoder positions when they have learned ones (448 in OpenAI's checkpoints), " \
           f"else {DEFAULT_MAX_LENGTH};" in text
