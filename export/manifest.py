"""Write manifest.json for an export directory (the reader and the format live in specdec.runtime.loading.manifest)."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

from specdec import __version__
from specdec.runtime.loading.manifest import FORMAT, FORMAT_VERSION, MANIFEST, sha256_file

_ONNX_DTYPES = {1: "float32", 10: "float16", 7: "int64", 6: "int32", 9: "bool"}


def graph_entry(root: Path, relative: str) -> dict:
    """File, input and output names, dtypes and shapes (symbolic axes as names) of one ONNX graph."""
    import onnx

    model = onnx.load(str(root / relative), load_external_data=False)

    def describe(values):
        out = []
        for v in values:
            t = v.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim]
            out.append({"name": v.name, "dtype": _ONNX_DTYPES.get(t.elem_type, str(t.elem_type)), "shape": dims})
        return out

    return {"file": relative, "inputs": describe(model.graph.input), "outputs": describe(model.graph.output)}


def architecture(config) -> dict:
    """The facts the runtime needs to size buffers, plus enough to tell which T5 variant (or Whisper) this is."""
    if config.model_type == "whisper":
        heads = config.decoder_attention_heads
        return {"model_type": "whisper", "variant": "whisper", "layers": config.encoder_layers,
                "decoder_layers": config.decoder_layers, "heads": heads, "d_kv": config.d_model // heads,
                "d_model": config.d_model, "d_ff": config.decoder_ffn_dim, "vocab_size": config.vocab_size,
                "num_mel_bins": config.num_mel_bins, "source_positions": config.max_source_positions,
                "target_positions": config.max_target_positions}
    gated = bool(getattr(config, "is_gated_act", False))
    return {
        "model_type": config.model_type,
        "variant": ("mt5" if config.model_type == "mt5" else "t5-v1.1" if gated else "t5-v1.0"),
        "feed_forward_proj": config.feed_forward_proj,
        "scale_decoder_outputs": bool(getattr(config, "scale_decoder_outputs", True)),
        "layers": config.num_layers,
        "decoder_layers": config.num_decoder_layers,
        "heads": config.num_heads,
        "d_kv": config.d_kv,
        "d_model": config.d_model,
        "d_ff": config.d_ff,
        "vocab_size": config.vocab_size,
        "relative_attention_num_buckets": config.relative_attention_num_buckets,
        "relative_attention_max_distance": config.relative_attention_max_distance,
    }


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
    """A Whisper export's "speech" entry: the audio its encoder graph takes, the decoder prompt's tokens (start of
    transcript, languages, tasks, no timestamps) and the tokens generation suppresses, from the target's generation
    config; each model's encoder_sha256 (`digest`) and which drafts keep the target's encoder."""
    from .whisper_encoder import keeps_target_encoder

    target = sources["target"]
    gen, extractor = target.generation, target.extractor        # generation_config.json, as saved

    def ids(values):
        return [int(v) for v in (values or [])]

    nots = gen.get("no_timestamps_token_id")
    return {"sampling_rate": int(extractor.sampling_rate), "n_samples": int(extractor.n_samples),
            "frames": int(target.config.max_source_positions),
            "languages": {str(k): int(v) for k, v in (gen.get("lang_to_id") or {}).items()},
            "tasks": {str(k): int(v) for k, v in (gen.get("task_to_id") or {}).items()},
            "no_timestamps_token_id": None if nots is None else int(nots),
            "timestamps": timestamp_tokens(target.tokenizer, int(target.config.max_source_positions)),
            "suppress_tokens": ids(gen.get("suppress_tokens")),
            "begin_suppress_tokens": ids(gen.get("begin_suppress_tokens")),
            "encoder_sha256": digest,
            "shares_target_encoder": keeps_target_encoder(digest)}


def write_manifest(root: Path, *, models: dict, head: dict, tokenizer_file: str, special_ids: dict,
                   vocab_size: int, gamma_max: int, max_length: int, dtype: str, checks: dict,
                   datastore: str | None = None, speech: dict | None = None,
                   graph_capture: dict | None = None) -> Path:
    """`models`: role -> {"source", "revision", "config", "graphs": {"encoder": rel, "decoder": rel, and with
    `graph_capture` "capture_decoder" and "capture_head"}}; `graph_capture`: {"cross_pad": rel, "cache_capacity",
    "source_capacity", "token_slots"} (export/capture.py)."""
    entry = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "specdec_version": __version__,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gamma_max": gamma_max,
        "max_length": max_length,
        "dtype": dtype,
        "vocab_size": vocab_size,
        "special_ids": special_ids,
        "tokenizer": tokenizer_file,
        **({"datastore": datastore} if datastore else {}),
        **({"speech": speech} if speech else {}),
        **({"graph_capture": {**graph_capture, "cross_pad": graph_entry(root, graph_capture["cross_pad"])}}
           if graph_capture else {}),
        "models": {
            role: {"source": m["source"], "revision": m["revision"], "architecture": architecture(m["config"]),
                   "weights": m.get("weights", dtype),
                   **({"quantization": m["quantization"]} if m.get("quantization") else {}),
                   "graphs": {kind: graph_entry(root, rel) for kind, rel in m["graphs"].items()}}
            for role, m in models.items()},
        "head": head,
        "parity_check": checks,
    }
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != MANIFEST
                   and not p.name.startswith("."))
    entry["files"] = {rel: sha256_file(root / rel) for rel in files}
    path = root / MANIFEST
    path.write_text(json.dumps(entry, indent=2) + "\n")
    return path
