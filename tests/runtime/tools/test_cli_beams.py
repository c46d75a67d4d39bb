"""`specdec-generate` with beam search: --num-beams, --length-penalty, --early-stopping, --num-return-sequences,
--min-new-tokens and --no-repeat-ngram-size give what SpeculativeDecoder.generate gives for the same params (the
returned sequences, their scores and texts); bad values and --stream with beams are one line on stderr and exit
status 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specdec.runtime import SpeculativeDecoder
from specdec.runtime.tools.generate import main

EARLY = {"true": True, "false": False, "never": "never"}


@pytest.fixture(scope="module")
def decoder(tiny_export):
    return SpeculativeDecoder.load(tiny_export, provider="cpu", threads=1)


@pytest.fixture(scope="module")
def varied_text(decoder):
    """A prompt whose 8 best beams have different lengths and differ between --early-stopping true and never (so
    that a wrong mapping of the flag would show)."""
    def beams(text, early):
        res = decoder.generate(text, max_new_tokens=12, num_beams=8, num_return_sequences=8, length_penalty=-1.0,
                               early_stopping=early)
        return res.sequences, res.scores

    for a in range(2, 48, 3):
        for b in range(2, 48, 5):
            text = f"w{a} w{b}"
            found = beams(text, "never")
            if len({len(s) for s in found[0]}) >= 3 and beams(text, True) != found:
                return text
    pytest.fail("no prompt of the tiny export gives beams of different lengths")


def same(got: list, ref) -> bool:
    """The CLI's sequences equal the Python API's: tokens exactly; scores exactly where both took the same path (a
    fixed gamma), else to float32 rounding (gamma "auto" picks speculation per step from timings, and a target run
    over k + 1 tokens rounds the logits a little differently from k + 1 single steps)."""
    tokens = [s["token_ids"] for s in got]
    scores = [s["score"] for s in got]
    if not ref.scores:                                # no beams: no score
        return tokens == ref.sequences and scores == [None]
    return tokens == ref.sequences and scores == pytest.approx(ref.scores, rel=1e-5, abs=1e-6)


def pairs(ref) -> list:
    """The Python API's (tokens, score) per sequence, as the CLI prints them (score None without beams)."""
    return list(zip(ref.sequences, ref.scores or [None] * len(ref.sequences)))


def cli(tiny_export, capsys, *args) -> tuple[int, str, str]:
    code = main(["--export", str(tiny_export), "--provider", "cpu", "--threads", "1", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def as_json(tiny_export, capsys, *args) -> dict:
    code, out, err = cli(tiny_export, capsys, "--json", *args)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("args, params", [
    (["--num-beams", 4, "--num-return-sequences", 3, "--length-penalty", 2, "--early-stopping", "true",
      "--gamma", 2, "--draft", "draft"],
     dict(num_beams=4, num_return_sequences=3, length_penalty=2.0, early_stopping=True, gamma=2, draft="draft")),
    (["--num-beams", 4, "--num-return-sequences", 2, "--min-new-tokens", 8, "--no-repeat-ngram-size", 2,
      "--length-penalty", -0.5],
     dict(num_beams=4, num_return_sequences=2, min_new_tokens=8, no_repeat_ngram_size=2, length_penalty=-0.5)),
    (["--num-beams", 3, "--draft", "none"], dict(num_beams=3, draft="none")),
    (["--num-beams", 16, "--num-return-sequences", 16, "--gamma", 0], dict(num_beams=16, num_return_sequences=16,
                                                                          gamma=0)),
    (["--min-new-tokens", 4, "--no-repeat-ngram-size", 2, "--gamma", 3], dict(min_new_tokens=4,
                                                                              no_repeat_ngram_size=2, gamma=3)),
])
def test_json_equals_the_python_api(tiny_export, capsys, decoder, args, params):
    got = as_json(tiny_export, capsys, "--max-new-tokens", 12, *args, "w20 w30")
    ref = decoder.generate("w20 w30", max_new_tokens=12, **params)
    if "gamma" in params or params.get("draft") == "none":
        assert [(s["token_ids"], s["score"]) for s in got["sequences"]] == pairs(ref)
    assert same(got["sequences"], ref)
    assert [s["text"] for s in got["sequences"]] == [decoder.decode(s) for s in ref.sequences]
    assert (got["text"], got["token_ids"], got["stop_reason"]) == (ref.text, ref.token_ids, ref.stop_reason)
    assert len(got["sequences"]) == params.get("num_return_sequences", 1)
    assert got["stats"]["new_tokens"] == len(ref.token_ids)
    if params.get("no_repeat_ngram_size"):            # the processors' flags reached the runtime
        for seq in ref.sequences:
            assert len(set(zip(seq, seq[1:]))) == len(seq) - 1 and 1 not in seq[:params["min_new_tokens"] - 1]


@pytest.mark.parametrize("flag", list(EARLY))
def test_early_stopping_values(tiny_export, capsys, decoder, varied_text, flag):
    got = as_json(tiny_export, capsys, "--max-new-tokens", 12, "--num-beams", 8, "--num-return-sequences", 8,
                  "--length-penalty", -1, "--early-stopping", flag.upper() if flag == "never" else flag, "--gamma", 2,
                  varied_text)
    ref = decoder.generate(varied_text, max_new_tokens=12, num_beams=8, num_return_sequences=8, length_penalty=-1.0,
                           early_stopping=EARLY[flag], gamma=2)
    assert [(s["token_ids"], s["score"]) for s in got["sequences"]] == pairs(ref)
    assert len({len(s["token_ids"]) for s in got["sequences"]}) >= 2


def test_text_mode_numbers_the_sequences(tiny_export, capsys, decoder, varied_text):
    code, out, err = cli(tiny_export, capsys, "--max-new-tokens", 12, "--num-beams", 8, "--num-return-sequences", 5,
                         "--length-penalty", -1, "--early-stopping", "never", "--gamma", 0, varied_text)
    assert code == 0, err
    ref = decoder.generate(varied_text, max_new_tokens=12, num_beams=8, num_return_sequences=5, length_penalty=-1.0,
                           early_stopping="never", gamma=0)
    assert out.splitlines() == [f"{i}. [{score:.4f}] {decoder.decode(seq)}"
                                for i, (seq, score) in enumerate(zip(ref.sequences, ref.scores), 1)]
    assert "tokens/target call" in err and err.count("\n") == 2          # the stats line and the sources line


def test_one_sequence_prints_the_text(tiny_export, capsys, decoder):
    code, out, err = cli(tiny_export, capsys, "--max-new-tokens", 12, "--num-beams", 4, "w20 w30")
    assert code == 0, err
    assert out == decoder.generate("w20 w30", max_new_tokens=12, num_beams=4).text + "\n"   # tokens are exact
    greedy = as_json(tiny_export, capsys, "--max-new-tokens", 12, "--gamma", 3, "w20 w30")
    ref = decoder.generate("w20 w30", max_new_tokens=12, gamma=3)
    assert greedy["sequences"] == [{"text": ref.text, "token_ids": ref.token_ids, "score": None}]


@pytest.mark.parametrize("args, needle", [
    (["--num-beams", 0], "--num-beams must be an integer in 1..16 (got 0)"),
    (["--num-beams", 17], "--num-beams must be an integer in 1..16 (got 17)"),
    (["--num-beams", 4, "--num-return-sequences", 5], "--num-return-sequences must be an integer in 1..num_beams (4)"),
    (["--num-return-sequences", 2], "--num-return-sequences must be an integer in 1..num_beams (1)"),
    (["--num-beams", 2, "--temperature", 0.5], "beam search is deterministic"),
    (["--num-beams", 2, "--early-stopping", "maybe"], "--early-stopping must be true, false or never (got 'maybe')"),
    (["--num-beams", 2, "--length-penalty", "nan"], "--length-penalty must be a finite number"),
    (["--num-beams", 2, "--min-new-tokens", -1], "--min-new-tokens must be an integer >= 0"),
    (["--num-beams", 2, "--no-repeat-ngram-size", -1], "--no-repeat-ngram-size must be an integer >= 0"),
    (["--num-beams", 2, "--draft", "lookup"], "beam search speculates with a draft model"),
    (["--num-beams", 4, "--stream"], "--stream cannot show a beam search"),
    (["--num-beams", 4, "--stream", "--json"], "--stream cannot show a beam search"),
    (["--stream", "--json"], "--stream prints the text as it is accepted and --json one object at the end; pass one"),
    (["--stream", "--format", "json"], "--stream prints the text as it is accepted and --json one object"),
])
def test_bad_values_are_one_line(tiny_export, capsys, args, needle):
    code, out, err = cli(tiny_export, capsys, *args, "w20 w30")
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and needle in err, err


@pytest.mark.parametrize("args, needle", [
    (["--num-beams", "x"], "argument --num-beams: invalid int value: 'x'"),
    (["--length-penalty", "long"], "argument --length-penalty: invalid float value: 'long'"),
    (["--num-beams", "4", "--stream"], "--stream cannot show a beam search"),
])
def test_exit_status_and_one_line_from_the_command(tiny_export, args, needle):
    """The installed entry point: a bad value, whether argparse or the runtime refuses it, is one line and status 2."""
    proc = subprocess.run([sys.executable, "-m", "specdec.runtime.tools.generate", "--export", str(tiny_export), *args, "w5"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], proc.stderr
