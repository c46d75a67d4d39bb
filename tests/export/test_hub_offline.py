"""A hub id that is not at hand: a notice before the hub is asked (where, without a network, it waits ~25 s), none
with HF_HUB_OFFLINE=1, which fails at once; the error mentions HF_HUB_OFFLINE=1 and its hint names a local folder
after the id (./whisper-small for openai/whisper-small), under the flag that named it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from specdec.export.source import hub_notice


def test_a_notice_before_the_hub_is_asked(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    line = hub_notice("openai/whisper-small")
    assert line.startswith("'openai/whisper-small' is not a local directory: asking the Hugging Face hub")
    assert "~25 s" in line and "HF_HUB_OFFLINE=1" in line and "\n" not in line
    assert hub_notice(str(tmp_path)) is None                # a local directory is never asked of the hub
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub_notice("openai/whisper-small") is None       # offline: the cache only, no wait to announce


@pytest.mark.parametrize("flag, name, hint", [
    ("--target", "nobody-here/whisper-small-made-up", "--target ./whisper-small-made-up"),
    ("--draft", "nobody-here/t5-tiny-made-up", "--draft ./t5-tiny-made-up"),
])
def test_offline_a_made_up_id_fails_at_once(tiny_pair, tmp_path, flag, name, hint):
    target, draft = (name, tiny_pair[1]) if flag == "--target" else (tiny_pair[0], name)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home"),
           "HF_HUB_CACHE": str(tmp_path / "hub-cache")}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "specdec.export.cli", "--target", target, "--draft", draft,
                           "--export", str(tmp_path / "out")], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)
    took = time.perf_counter() - started
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and line.startswith(f"error: model '{name}' could not be found in the local Hugging "
                                                "Face cache (HF_HUB_OFFLINE is set)"), line
    assert f"e.g. {hint} " in line and "./t5-large" not in line, line
    assert "not a local directory" not in proc.stdout          # no notice: nothing waits for a network
    assert took < 20, f"an offline lookup took {took:.1f} s"
    assert not (tmp_path / "out").exists()


def test_the_online_error_mentions_hf_hub_offline(monkeypatch):
    """The error after the hub's wait (not run here: it needs ~25 s) says how to skip the wait next time."""
    from specdec.export.source import _not_found

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    err = str(_not_found("openai/whisper-base", OSError("no network"), "mid"))
    assert err.startswith("model 'openai/whisper-base' could not be found on the Hugging Face hub (no network?)")
    assert "e.g. --draft mid=./whisper-base " in err and "set HF_HUB_OFFLINE=1" in err, err
