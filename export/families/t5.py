"""The T5 family: T5 v1.0, v1.1 / flan-t5 / t5-efficient and mT5 checkpoints (model_type 't5' or 'mt5').

Its graphs are export/families/t5_encoder.py (source ids -> cross K/V) and t5_decoder.py (the decoder with its
KV cache and the speculative head); the capturable graphs (export/capture.py) are T5's too. Every dtype exports.
"""

from __future__ import annotations

from ..source import Source, read_source
from .base import Family


class T5Family(Family):
    name = "t5"
    title = "T5"
    model_types = ("t5", "mt5")
    supported = ("T5 v1.0 (t5-small ... t5-11b), T5 v1.1 / flan-t5 / t5-efficient and mT5 checkpoints "
                 "(model_type 't5' or 'mt5')")

    def load(self, name: str, role: str, config) -> Source:
        from transformers import T5ForConditionalGeneration

        # mT5 never scales decoder outputs (MT5ForConditionalGeneration), but configs saved by transformers >= 5 say
        # tie_word_embeddings=true, from which T5Config would infer v1.0's scaling: say it explicitly.
        extra = {"scale_decoder_outputs": False} if config.model_type == "mt5" else {}
        return read_source(name, role, config, T5ForConditionalGeneration, **extra)

    def graph_writer(self, source: Source, stage: str, dtype, opset: int, tree: bool, sharing: dict | None = None):
        from ..attention import cast_for_export
        from . import t5_decoder, t5_encoder

        model = cast_for_export(source.model, dtype)
        if stage == "encoder":
            return lambda p: t5_encoder.export_encoder(model, p, opset)
        return lambda p: t5_decoder.export_decoder(model, p, dtype, opset, tree=tree)

    def architecture(self, config) -> dict:
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


FAMILY = T5Family()
