"""specdec-generate's errors speak its flags (--audio, --num-beams), where the runtime's own errors, raised to Python
callers, speak the Python API (audio=, input_ids, num_beams); the runtime's messages stay as they are."""

from __future__ import annotations

import subprocess
import sys

import pytest

from specdec.runtime import SpecdecError, SpeculativeDecoder
from specdec.runtime.tools.generate import in_flags


def _cli(export, *args) -> str:
    proc = subprocess.run([sys.executable, "-m", "specdec.runtime.tools.generate", "--export", str(export),
                           "--provider", "cpu", *map(str, args)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
    return proc.stderr.strip()


def test_audio_for_a_text_export(tiny_export, tmp_path):
    wav = tmp_path / "a.wav"
    wav.write_bytes(b"")
    line = _cli(tiny_export, "--audio", wav)
    assert line == ("error: --audio, --language, --task and --timestamps are for Whisper exports; this export is a "
                    "text model; pass a prompt text.")
    with pytest.raises(SpecdecError, match="audio, language, task and timestamps are for Whisper exports; .* "
                                           "pass a prompt text or input_ids"):
        SpeculativeDecoder.load(tiny_export, provider="cpu").generate(audio=str(wav))


def test_a_prompt_for_a_whisper_export(whisper_pair):
    line = _cli(whisper_pair[1] / "export", "hello")
    assert line.startswith("error: this is a Whisper export: it transcribes audio") and line.endswith(
        "; pass --audio FILE.wav (16 kHz)."), line
    assert "audio=" not in line and "input_ids" not in line


def test_a_request_parameter_is_named_by_its_flag(tiny_export):
    line = _cli(tiny_export, "--num-beams", 2, "--temperature", 0.5, "w5")
    assert "--num-beams 2" in line and "use --temperature 0 with beams, or --num-beams 1 to sample" in line, line
    assert "num_beams" not in line and "temperature=" not in line


@pytest.mark.parametrize("python, cli", [
    ("top_p must be in (0, 1] (got 0.0); use 1.0 to disable top-p", "--top-p must be in (0, 1] (got 0.0); use 1.0 "
                                                                   "to disable top-p"),
    ("this Whisper model is English-only: it takes no language; leave out language",
     "this Whisper model is English-only: it takes no language; leave out --language"),
    ("provider 'cuda' is not available; use provider='cpu'", "--provider 'cuda' is not available; use --provider cpu"),
    ("the prompt is 90 tokens, longer than max_length 64; re-export with a larger --max-length",
     "the prompt is 90 tokens, longer than max_length 64; re-export with a larger --max-length"),
    ("unknown draft 'x'; use none, draft or lookup,draft (e.g. 'lookup,draft')",
     "unknown draft 'x'; use none, draft or lookup,draft (e.g. 'lookup,draft')"),
])
def test_in_flags(python, cli):
    assert in_flags(python) == cli


def test_language_without_audio_is_refused_not_ignored(tiny_export):
    line = _cli(tiny_export, "--language", "en", "summarize: a text")
    assert line == "error: --language is for transcripts; pass --audio FILE.wav with a Whisper export, or leave out " \
                   "--language.", line
