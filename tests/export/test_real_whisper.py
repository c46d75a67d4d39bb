"""Real Whisper weights (tiny.en, as faster-whisper publishes it), when `python -m specdec.bench.whisper_models fetch
tiny.en` has put them in the cache; skipped with that command otherwise (they are not in the repository). The
faster-whisper folder is exported as it is, target alone, fp32 and int8, and decoded on held-out synthesized clips
(espeak-ng voices the bundled speech pair never trained on): fp32 greedy output equals transformers' greedy generate
on the same weights token for token, target-only and the default alike; the int8 export decodes its own target-only
output with the default. The int8 parity check ran as both CPU kernels compute it (export's own lines)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.real_whisper

CLIPS = 4


@pytest.fixture(scope="module")
def tiny_en(tmp_path_factory):
    from specdec.bench.whisper_models import path_of

    folder = path_of("tiny.en")
    if folder is None:
        pytest.skip("Whisper tiny.en is not in the cache: python -m specdec.bench.whisper_models fetch tiny.en")
    pytest.importorskip("espeakng_loader",
                        reason="the clips are synthesized with espeak-ng (pip install -e '.[models]')")
    from specdec.bench.whisper_clips import make_clips

    root = tmp_path_factory.mktemp("tiny-en")
    clips = make_clips(root / "clips", count=CLIPS, seed=11)
    return folder, root, clips


def export(folder, out, *extra):
    from tinymodels import run_export_cli

    code, stdout, stderr = run_export_cli(["--target", folder, "--export", out, *extra])
    assert code == 0, stderr
    return stdout


def audio_of(root, clip):
    from specdec.runtime.loading.audio import check_audio

    return check_audio(root / "clips" / clip.audio)


def test_fp32_greedy_is_transformers_greedy_on_real_weights(tiny_en):
    from specdec.bench.common.whisper_peers import TransformersPeer
    from specdec.export.families import checkpoint_path
    from specdec.runtime import SpeculativeDecoder

    folder, root, clips = tiny_en
    export(folder, root / "fp32")
    decoder = SpeculativeDecoder.load(root / "fp32", provider="cpu", threads=1)
    assert decoder.max_length == 448
    peer = TransformersPeer(checkpoint_path(str(folder), log=lambda _: None), threads=1)
    for clip in clips:
        audio = audio_of(root, clip)
        want = peer.transcribe(audio, None).token_ids
        assert want, clip
        for draft in ("none", "auto"):
            got = decoder.generate(audio=audio, draft=draft, max_new_tokens=224)
            assert [t for t in got.token_ids if t < decoder.eos_id] == want, (clip.reference, draft, got.text)


def test_int8_decodes_its_own_output_on_real_weights(tiny_en):
    from specdec.runtime import SpeculativeDecoder

    folder, root, clips = tiny_en
    stdout = export(folder, root / "int8", "--dtype", "int8")
    assert "target as x86 CPUs without VNNI compute it" in stdout
    decoder = SpeculativeDecoder.load(root / "int8", provider="cpu", threads=1)
    for clip in clips:
        audio = audio_of(root, clip)
        alone = decoder.generate(audio=audio, draft="none", max_new_tokens=224)
        assert alone.text.strip()
        assert decoder.generate(audio=audio, max_new_tokens=224).token_ids == alone.token_ids
