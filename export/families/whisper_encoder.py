"""Whisper's encoder graph: 16 kHz float32 PCM -> the cross-attention K/V of every decoder layer, with the log-mel
features computed inside the graph, so a C host or a Triton client sends audio, not features.

    audio     fp32  [batch, samples]      16 kHz mono PCM, samples <= n_samples (480,000 = 30 s; zero-padded to it)
    cross_kv  dtype [dec_layers, 2, batch, heads, frames, d_kv]      frames = max_source_positions (1,500)

The features are WhisperFeatureExtractor's, as ONNX ops (`LogMel`): the waveform zero-padded to n_samples,
reflect-padded by n_fft/2 at both ends, framed every hop_length samples by a convolution whose kernels are the
periodic Hann window times the real and imaginary DFT rows (one output channel per frequency bin and part),
the power spectrum without its last frame, the extractor's own mel filters, log10 of at least 1e-10, floored at the
row's maximum - 8 and scaled as (x + 4) / 4. A convolution rather than ONNX's STFT operator: every provider (CPU,
CUDA, TensorRT) runs it. The encoder is the checkpoint's own, followed by every decoder layer's encoder-attention
key and value projections, in the layout the T5 encoder graph writes (t5_encoder.py), so the decoders read
Whisper's cross K/V as they read T5's.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import torch
from torch import nn

from specdec.runtime.core.graph_io import ENCODER_OUTPUTS, shared_cross
from specdec.runtime.loading.audio import SPEECH_INPUTS


class LogMel(nn.Module):
    """PCM [batch, samples] -> log-mel features [batch, mel_bins, frames] as WhisperFeatureExtractor computes them
    (its numpy path, dither 0), from the extractor's n_fft, hop_length, n_samples and mel filters."""

    pad_mode = "reflect"          # the frames' centring, as numpy's spectrogram(center=True) pads

    def __init__(self, extractor):
        super().__init__()
        self.n_fft, self.hop, self.n_samples = extractor.n_fft, extractor.hop_length, extractor.n_samples
        n = np.arange(self.n_fft)
        window = 0.5 - 0.5 * np.cos(2 * math.pi * n / self.n_fft)            # periodic Hann, as the extractor's
        bins = np.arange(self.n_fft // 2 + 1)[:, None]
        angle = 2 * math.pi * bins * n[None, :] / self.n_fft
        kernels = np.concatenate([np.cos(angle) * window, -np.sin(angle) * window])    # [2 * bins, n_fft]
        self.register_buffer("dft", torch.tensor(kernels[:, None, :], dtype=torch.float32))
        # extractor.mel_filters: [bins, mel_bins]
        self.register_buffer("mel", torch.tensor(np.asarray(extractor.mel_filters).T, dtype=torch.float32))

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        audio = nn.functional.pad(audio, (0, self.n_samples - audio.shape[-1]))
        half = self.n_fft // 2
        framed = nn.functional.pad(audio[:, None, :], (half, half), mode=self.pad_mode)
        spectrum = nn.functional.conv1d(framed, self.dft, stride=self.hop)          # [batch, 2 * bins, frames + 1]
        bins = spectrum.shape[1] // 2
        power = spectrum[:, :bins, :-1] ** 2 + spectrum[:, bins:, :-1] ** 2
        log_spec = torch.log10(torch.clamp(torch.matmul(self.mel, power), min=1e-10))
        floor = log_spec.amax(dim=(1, 2), keepdim=True) - 8.0
        return (torch.maximum(log_spec, floor) + 4.0) / 4.0


class _SelfAttention(torch.autograd.Function):
    """softmax(q k^T / sqrt(d)) v over every head: q, k, v [B, T, H*d] -> [B, T, H*d], traced as one onnxruntime
    com.microsoft MultiHeadAttention node (its default scale is 1/sqrt(d)). One node in place of a MatMul, a scale,
    a Softmax and another MatMul with their transposes: measured 25.1 against 30.2 ms per layer of whisper base at
    1,500 positions on 2 cores (its scores never leave the kernel as a tensor)."""

    @staticmethod
    def forward(ctx, q, k, v, heads: int):
        b, t, width = q.shape
        d = width // heads

        def split(x):
            return x.reshape(b, t, heads, d).transpose(1, 2)
        scores = torch.matmul(split(q), split(k).transpose(-1, -2)) * d ** -0.5
        out = torch.matmul(torch.softmax(scores, dim=-1), split(v))
        return out.transpose(1, 2).reshape(b, t, width)

    @staticmethod
    def symbolic(g, q, k, v, heads: int):
        return g.op("com.microsoft::MultiHeadAttention", q, k, v, num_heads_i=heads).setType(q.type())


def encoder_states(encoder, features: torch.Tensor) -> torch.Tensor:
    """Hugging Face's WhisperEncoder forward (eval, fp32) written out, each self-attention one _SelfAttention:
    log-mel [B, mels, 2 * frames] -> [B, frames, d_model]. Its weight products keep Hugging Face's order per block
    (q, k, v, out, fc1, fc2), which the int8 policy counts on (export/quantize.py encoder_matmuls)."""
    x = nn.functional.gelu(encoder.conv1(features))
    x = nn.functional.gelu(encoder.conv2(x)).permute(0, 2, 1)
    x = x + encoder.embed_positions.weight[:x.shape[1]]
    for layer in encoder.layers:
        sa = layer.self_attn
        h = layer.self_attn_layer_norm(x)
        x = x + sa.out_proj(_SelfAttention.apply(sa.q_proj(h), sa.k_proj(h), sa.v_proj(h), sa.num_heads))
        h = layer.final_layer_norm(x)
        x = x + layer.fc2(layer.activation_fn(layer.fc1(h)))
    return encoder.layer_norm(x)


class WhisperEncoderWithCrossKV(nn.Module):
    """audio -> LogMel -> the checkpoint's encoder -> every decoder layer's cross-attention K and V; and for each
    model in `sharing` (drafts that keep this encoder, by encoder_sha256) its own decoder layers' K and V of the same
    encoder output, so that no draft runs an encoder of its own."""

    def __init__(self, model, extractor, sharing: dict | None = None):
        super().__init__()
        self.features = LogMel(extractor)
        self.encoder = model.model.encoder
        models = (model, *(sharing or {}).values())
        self.models = nn.ModuleList(m.model.decoder for m in models)
        self.heads = [m.config.decoder_attention_heads for m in models]
        self.d_kv = [m.config.d_model // m.config.decoder_attention_heads for m in models]

    def forward(self, audio: torch.Tensor):
        h = encoder_states(self.encoder, self.features(audio))                          # [batch, frames, d_model]
        batch, frames = h.shape[0], h.shape[1]
        outputs = []
        for decoder, heads, d_kv in zip(self.models, self.heads, self.d_kv):
            def split(x):                                                          # [batch, heads, frames, d]
                return x.reshape(batch, frames, heads, d_kv).transpose(1, 2)

            kv = [torch.stack([split(layer.encoder_attn.k_proj(h)), split(layer.encoder_attn.v_proj(h))])
                  for layer in decoder.layers]
            outputs.append(torch.stack(kv).to(self.encoder.conv1.weight.dtype))
        return tuple(outputs) if len(outputs) > 1 else outputs[0]


def encoder_sha256(model) -> str:
    """sha256 over the encoder's parameters and buffers (names, dtypes, shapes, bytes) of a Whisper model: a draft
    whose digest equals the target's (distil-whisper keeps its teacher's encoder) needs no encoder of its own and can
    read the target's encoder output. The decoder layers' cross K/V projections are not part of it: they belong to
    each model's decoder, so a shared encoder's output still goes through the draft's own projections."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.model.encoder.state_dict().items()):
        data = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{data.dtype}|{tuple(data.shape)}|".encode())
        if data.numel():
            digest.update(data.view(torch.uint8).numpy())       # the tensor's bytes, not a copy of them
    return digest.hexdigest()


def keeps_target_encoder(digests: dict) -> list:
    """The drafts (role -> encoder_sha256, the target's among them) whose encoder is the target's."""
    return sorted(role for role, digest in digests.items() if role != "target" and digest == digests["target"])


def export_whisper_encoder(model, extractor, path, opset: int = 17, sharing: dict | None = None) -> None:
    """Write the encoder graph of `model` (a WhisperForConditionalGeneration) with `extractor`'s features; with
    `sharing` (role -> draft model keeping this encoder) also each draft's cross K/V (output shared_cross(role))."""
    module = WhisperEncoderWithCrossKV(model, extractor, sharing).eval()
    audio = torch.zeros((1, extractor.sampling_rate), dtype=torch.float32)
    names = [*ENCODER_OUTPUTS, *(shared_cross(role) for role in sharing or {})]
    with torch.no_grad():
        torch.onnx.export(module, (audio,), str(path), input_names=list(SPEECH_INPUTS), output_names=names,
                          dynamic_axes={"audio": {0: "batch", 1: "samples"}, **{n: {2: "batch"} for n in names}},
                          opset_version=opset, dynamo=False, do_constant_folding=True)
