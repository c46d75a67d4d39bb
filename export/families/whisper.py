"""The Whisper family: Whisper and distil-whisper checkpoints (model_type 'whisper').

Its graphs are export/families/whisper_encoder.py (16 kHz PCM -> log-mel features -> cross K/V, with the cross K/V
of drafts that keep the target's encoder) and whisper_decoder.py (the decoder with the T5 decoder graph's inputs
and outputs, export/tracing.py). Besides the weights and the tokenizer it loads the feature extractor
(preprocessor_config.json) and generation_config.json, from which the manifest's "speech" entry is written. Its
exports are fp32 or int8 (int8 encoders under the int8 policy of export/quantize.py, with the log-mel front end and
the convolutions in fp32; decoders in fp32: int8_stages), without capturable graphs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from specdec.runtime.core.errors import SpecdecError

from ..source import Source, read_source
from .base import Family


class WhisperFamily(Family):
    name = "whisper"
    title = "Whisper"
    model_types = ("whisper",)
    supported = "Whisper / distil-whisper (model_type 'whisper')"
    folders = "a CTranslate2 / faster-whisper Whisper folder (model.bin, config.json, tokenizer.json)"
    # int8 quantizes the encoders only. A Whisper decoder step reads its float32 output projection (51,865 x d_model)
    # and cross K/V whatever the layers' weights: measured on whisper base, 10.0 ms a step in fp32 against 10.5 with
    # int8 layers (the per-token scales cost what int8 saves), while int8 decoder layers added most of the logit
    # drift (parity 1.03 / 1.29 against 0.44 / 0.33 with the encoder alone in int8; tolerance 1.9) and changed 4 of
    # 24 held-out transcripts from fp32's, against 2 of 24.
    int8_stages = ("encoder",)

    def transformers_folder(self, name: str) -> str | None:
        """A CTranslate2 / faster-whisper folder's lossless conversion (ctranslate2_whisper.py), cached."""
        from .ctranslate2_whisper import cached_conversion, is_ct2_folder

        return str(cached_conversion(name)) if is_ct2_folder(name) else None

    def refuse(self, opts, roles) -> None:
        if opts.graph_capture:
            raise SpecdecError("--graph-capture is for T5 pairs for now: a Whisper pair has no capturable graphs",
                               "leave out --graph-capture for a Whisper pair")
        if "fp16" in {opts.weights(role) for role in roles}:
            raise SpecdecError("Whisper exports are fp32 or int8 for now, not fp16 (--dtype and --draft-dtype)",
                               "use --dtype int8 (the CPU's fastest) or leave out --dtype for fp32")

    def load(self, name: str, role: str, config) -> Source:
        from transformers import WhisperForConditionalGeneration

        return read_source(name, role, config, WhisperForConditionalGeneration, extras_of=_extras)

    def graph_writer(self, source: Source, stage: str, dtype, opset: int, tree: bool, sharing: dict | None = None):
        if stage == "encoder":
            from .whisper_encoder import export_whisper_encoder

            return lambda p: export_whisper_encoder(source.model, source.extras["extractor"], p, opset, sharing)
        from .whisper_decoder import export_whisper_decoder

        return lambda p: export_whisper_decoder(source.model, p, dtype, opset, tree=tree)

    def encoder_digests(self, sources: dict) -> dict:
        """Each model's encoder_sha256, computed once per export: drafts whose digest is the target's get no encoder
        graph, and the manifest records them all."""
        from .whisper_encoder import encoder_sha256

        return {role: encoder_sha256(src.model) for role, src in sources.items()}

    def keeps_target_encoder(self, digests: dict) -> list:
        from .whisper_encoder import keeps_target_encoder

        return keeps_target_encoder(digests) if digests else []

    def probe(self, source: Source):
        """The encoder graph reads a probe's PCM, PyTorch the extractor's features of it (probe_audio)."""
        extractor = source.extras["extractor"]

        def inputs(_ids):
            audio, features = probe_audio(extractor)
            return audio, {"input_features": features}
        return inputs

    def architecture(self, config) -> dict:
        heads = config.decoder_attention_heads
        return {"model_type": "whisper", "variant": "whisper", "layers": config.encoder_layers,
                "decoder_layers": config.decoder_layers, "heads": heads, "d_kv": config.d_model // heads,
                "d_model": config.d_model, "d_ff": config.decoder_ffn_dim, "vocab_size": config.vocab_size,
                "num_mel_bins": config.num_mel_bins, "source_positions": config.max_source_positions,
                "target_positions": config.max_target_positions}

    def shipped_draft(self, path: str, log) -> str | None:
        """The distilled draft in models/ made for this target (whisper_drafts.py), when its fingerprint matches."""
        from transformers import WhisperConfig, WhisperForConditionalGeneration

        from . import whisper_drafts

        if not whisper_drafts.of_shape(WhisperConfig.from_pretrained(path)):
            return None             # no shipped draft is of this shape: the weights need not be read

        model = WhisperForConditionalGeneration.from_pretrained(path).eval()
        found = whisper_drafts.matching(model)
        if found is None:
            return None
        folder, record = found
        made = whisper_drafts.checkpoint(model, path, folder, record)
        log(f"  draft: the shipped draft {folder.name} (distilled for this target: fingerprint "
            f"{record['target_fingerprint'][:12]}), read as {made}; --no-draft exports the target alone")
        return str(made)

    def check_sources(self, sources: dict) -> None:
        """A draft made for a target (whisper_drafts.py's mark) goes with that target only; the target's
        fingerprint is kept for the manifest."""
        from .whisper_drafts import distilled_for, fingerprint

        marks = {role: mark for role, src in sources.items()
                 if role != "target" and (mark := distilled_for(str(src.name)))}
        target = sources["target"]
        target.extras["fingerprint"] = mine = fingerprint(target.model)
        for role, mark in marks.items():
            if mark["target_fingerprint"] != mine:
                raise SpecdecError(f"the {role} model {sources[role].name} is the draft {mark['name']}, distilled "
                                   f"for another target (fingerprint {mark['target_fingerprint'][:12]}, this target's "
                                   f"is {mine[:12]})", "leave out --draft: specdec-export attaches the shipped "
                                   "draft when one matches the target")
            sources[role].extras["distilled_for"] = mark["target_fingerprint"]

    def manifest_entries(self, sources: dict, digests: dict) -> dict:
        return {"speech": speech_entry(sources, digests)}


def _extras(name: str, config) -> dict:
    """What a Whisper checkpoint brings besides weights and tokenizer: its feature extractor (the encoder graph
    computes its features) and generation_config.json as saved (languages, tasks, suppressed tokens)."""
    return {"extractor": load_extractor(name, config), "generation": generation_file(name)}


def generation_file(name: str) -> dict:
    """A checkpoint's generation_config.json as saved. Read as JSON: transformers' GenerationConfig keeps only the
    fields it declares, and Whisper's prompt tokens (lang_to_id, task_to_id, no_timestamps_token_id) are not."""
    import json

    from transformers.utils import cached_file

    try:
        path = cached_file(name, "generation_config.json", _raise_exceptions_for_missing_entries=False)
    except (OSError, ValueError):
        path = None
    if path is None:
        raise SpecdecError(f"'{name}' has no generation_config.json: Whisper's prompt tokens are listed there",
                           "add the checkpoint's generation_config.json to its directory")
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise SpecdecError(f"the generation_config.json of '{name}' is unreadable ({type(err).__name__})",
                           "restore the checkpoint's generation_config.json") from None
    if not isinstance(data, dict):
        raise SpecdecError(f"the generation_config.json of '{name}' is not a JSON object",
                           "restore the checkpoint's generation_config.json")
    return data


def load_extractor(name: str, config):
    """A Whisper checkpoint's WhisperFeatureExtractor (preprocessor_config.json), checked against its encoder."""
    from transformers import WhisperFeatureExtractor

    try:
        extractor = WhisperFeatureExtractor.from_pretrained(name)
    except (OSError, ValueError) as err:
        raise SpecdecError(f"no feature extractor found for '{name}' ({type(err).__name__})",
                           "add preprocessor_config.json (WhisperFeatureExtractor.save_pretrained) to the "
                           "checkpoint directory") from None
    frames = extractor.n_samples // extractor.hop_length
    if extractor.feature_size != config.num_mel_bins or frames != 2 * config.max_source_positions:
        raise SpecdecError(f"the feature extractor of '{name}' makes {extractor.feature_size} mel bins x {frames} "
                           f"frames, but its encoder reads {config.num_mel_bins} x {2 * config.max_source_positions}",
                           "use the checkpoint's own preprocessor_config.json")
    return extractor


def probe_audio(extractor, seconds: float = 2.0, seed: int = 0):
    """A Whisper probe: a deterministic chirp with noise (PCM [1, samples]) and the extractor's features of it."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * extractor.sampling_rate)) / extractor.sampling_rate
    wave = (0.4 * np.sin(2 * np.pi * (200 + 400 * t) * t) + 0.02 * rng.standard_normal(len(t))).astype(np.float32)
    features = extractor(wave, sampling_rate=extractor.sampling_rate, return_tensors="np").input_features
    return wave[None], features.astype(np.float32)


def timestamp_tokens(tokenizer, frames: int) -> dict | None:
    """Whisper's timestamp tokens as the tokenizer has them: {"begin": the id of <|0.00|>, "count": how many follow
    it at consecutive ids, one every 0.02 s (<|0.02|>, <|0.04|>, ...), up to the window's end}; None without them
    (then the model transcribes without timestamps, and long audio is cut into windows by its quiet points)."""
    vocab = tokenizer.get_vocab()
    begin = vocab.get("<|0.00|>")
    if begin is None:
        return None
    count = 1
    while count <= frames and vocab.get(f"<|{count * 0.02:.2f}|>") == begin + count:
        count += 1
    return {"begin": int(begin), "count": count}


def speech_entry(sources: dict, digest: dict) -> dict:
    """A Whisper export's "speech" entry (runtime/loading/audio.py SPEECH): the audio its encoder graph takes, the
    decoder prompt's tokens (start of transcript, languages, tasks, no timestamps) and the tokens generation
    suppresses, from the target's generation config; each model's encoder_sha256 (`digest`) and which drafts keep
    the target's encoder."""
    from specdec.runtime.loading.audio import SPEECH
    from specdec.runtime.loading.schema import build

    from .whisper_encoder import keeps_target_encoder

    target = sources["target"]
    gen, extractor = target.extras["generation"], target.extras["extractor"]     # generation_config.json, as saved

    def ids(values):
        return [int(v) for v in (values or [])]

    nots = gen.get("no_timestamps_token_id")
    distilled = {role: src.extras["distilled_for"] for role, src in sources.items() if "distilled_for" in src.extras}
    return build(SPEECH, "speech",
                 sampling_rate=int(extractor.sampling_rate), n_samples=int(extractor.n_samples),
                 frames=int(target.config.max_source_positions),
                 languages={str(k): int(v) for k, v in (gen.get("lang_to_id") or {}).items()},
                 tasks={str(k): int(v) for k, v in (gen.get("task_to_id") or {}).items()},
                 no_timestamps_token_id=None if nots is None else int(nots),
                 timestamps=timestamp_tokens(target.tokenizer, int(target.config.max_source_positions)),
                 suppress_tokens=ids(gen.get("suppress_tokens")),
                 begin_suppress_tokens=ids(gen.get("begin_suppress_tokens")),
                 encoder_sha256=digest,
                 shares_target_encoder=keeps_target_encoder(digest),
                 **({"target_fingerprint": target.extras["fingerprint"]} if "fingerprint" in target.extras else {}),
                 **({"distilled_for": distilled} if distilled else {}))


FAMILY = WhisperFamily()
