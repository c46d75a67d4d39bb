"""`specdec-bench whisper` end to end on the tiny random multilingual Whisper of test_whisper_peers.py (the official
vocabulary layout), exported from its CTranslate2 folder: every specdec configuration gives transformers' greedy
tokens on every clip (the report's own exactness column, checked here against transformers run apart), the peers'
rows and the long recording are there, and the word error rate is the edit distance over words."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("faster_whisper")

from test_whisper_peers import build  # noqa: E402
from tinymodels import run_export_cli, whisper_audio  # noqa: E402

from specdec.bench.whisper import word_errors, words  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def write_wav(path, wave):
    from specdec.bench.whisper_clips import write_wav as write

    write(path, wave)
    return path


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    root = tmp_path_factory.mktemp("whisper-bench")
    hf, ct2 = build(root)
    code, _, stderr = run_export_cli(["--target", ct2, "--export", root / "export", "--gamma-max", "4"])
    assert code == 0, stderr
    clips = root / "clips"
    clips.mkdir()
    lines = []
    for i in range(2):
        write_wav(clips / f"{i}.wav", whisper_audio(2.5 + i, seed=i))
        lines.append(json.dumps({"audio": f"{i}.wav", "reference": "a chirp and a hum", "language": "en"}))
    (clips / "clips.jsonl").write_text("\n".join(lines) + "\n")
    long = np.concatenate([whisper_audio(20.0, seed=5), np.zeros(8000, np.float32), whisper_audio(15.0, seed=6)])
    write_wav(root / "long.wav", long)
    (root / "long.txt").write_text("a chirp")

    from specdec.bench.cli import main

    code = main(["whisper", "--export", f"fp32={root / 'export'}", "--weights", str(ct2), "--prompts",
                 str(clips / "clips.jsonl"), "--peers", "faster-whisper,transformers", "--repeat", "1",
                 "--threads", "1", "--long", str(root / "long.wav"), "--no-progress", "--json",
                 str(root / "out.json")])
    assert code == 0
    return root, hf, json.loads((root / "out.json").read_text())


def test_every_specdec_configuration_gives_transformers_greedy_tokens(bench):
    _, _, out = bench
    rows = {r["engine"]: r for r in out["engines"]}
    assert set(rows) == {"specdec fp32 none", "specdec fp32 auto", "faster-whisper", "transformers"}
    for name in ("specdec fp32 none", "specdec fp32 auto"):
        assert rows[name]["identical_to_transformers"] == 2, rows[name]
        assert rows[name]["identical_to_target_alone"] == 2
    assert rows["transformers"]["identical_to_transformers"] == 2
    for row in rows.values():
        assert row["ms_per_clip"] > 0 and row["wer"] >= 0
    assert rows["specdec fp32 none"]["x_faster-whisper"] == pytest.approx(
        rows["specdec fp32 none"]["ms_per_clip"] / rows["faster-whisper"]["ms_per_clip"])


def test_the_report_agrees_with_transformers_run_apart(bench):
    from specdec.bench.common.whisper_peers import TransformersPeer
    from specdec.runtime.loading.audio import check_audio

    root, hf, out = bench
    peer = TransformersPeer(hf, threads=1)
    texts = next(r for r in out["engines"] if r["engine"] == "specdec fp32 none")["texts"]
    for i, text in enumerate(texts):
        assert peer.transcribe(check_audio(root / "clips" / f"{i}.wav"), "en").text.strip() == text.strip()


def test_the_long_recording_runs_through_every_engine(bench):
    _, _, out = bench
    engines = {r["engine"] for r in out["long"]["rows"]}
    assert engines == {"specdec fp32 auto", "faster-whisper", "faster-whisper batched", "transformers"}
    assert out["long"]["seconds"] > 30


@pytest.mark.parametrize("reference, hypothesis, errors, count", [
    ("the cat sat", "the cat sat", 0, 3),
    ("The cat, sat.", "the cat sat", 0, 3),          # case and punctuation do not count
    ("the cat sat", "the bat sat down", 2, 3),       # one substitution, one insertion
    ("the cat sat on the mat", "cat on mat", 3, 6),  # three deletions
    ("don't stop", "dont stop", 1, 2),               # apostrophes inside words are kept
])
def test_word_errors_is_the_edit_distance_over_words(reference, hypothesis, errors, count):
    assert word_errors(reference, hypothesis) == (errors, count)
    assert words("Hello, World!") == ["hello", "world"]


def test_alpha_and_the_decoding_speedup_are_figured_from_each_run():
    from types import SimpleNamespace

    from specdec.bench.whisper import Engine, _summary

    def extra(ms, encoder_ms, tokens, accepted=0, proposed=0, rejections=0, target_calls=1, draft_calls=0):
        return {"encoder_ms": encoder_ms, "accepted": accepted, "proposed": proposed, "rejections": rejections,
                "decode_ms": ms - encoder_ms, "tokens": tokens, "target_calls": target_calls,
                "draft_calls": draft_calls, "draft_s": 0.001 * draft_calls, "target_s": 0.01 * target_calls}

    clips = [SimpleNamespace(reference=None)] * 2
    records = {
        "specdec e none": {"ms": [[100.0, 120.0]], "tokens": [[1], [2]], "text": ["a", "b"],
                           "extra": [[extra(100, 60, 10, target_calls=10), extra(120, 60, 12, target_calls=12)]]},
        "specdec e draft:4": {"ms": [[80.0, 90.0]], "tokens": [[1], [2]], "text": ["a", "b"],
                              "extra": [[extra(80, 60, 10, 6, 8, 2, 4, 8), extra(90, 60, 12, 9, 12, 3, 5, 12)]]},
    }
    rows = {r["engine"]: r for r in _summary([Engine(n, None, "specdec") for n in records], clips, records)}
    guess = rows["specdec e draft:4"]
    assert guess["alpha"] == pytest.approx(15 / 20) and guess["kept_per_guess"] == pytest.approx(15 / 20)
    # decoding: target alone 100 ms over 22 tokens, with the draft 50 ms over 22 tokens
    assert guess["decode_speedup"] == pytest.approx(2.0)
    assert guess["c"] == pytest.approx((0.02 / 20) / (0.09 / 9))
    assert rows["specdec e none"]["alpha"] is None and rows["specdec e none"]["decode_speedup"] == 1.0
