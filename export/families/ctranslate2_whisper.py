"""Read a CTranslate2 Whisper folder (faster-whisper's format) back into a transformers Whisper checkpoint folder,
losslessly, so specdec-export can take the models people already have on disk.

A CTranslate2 folder holds model.bin (every weight, in CTranslate2's own binary layout), config.json (Whisper's
decoding settings), vocabulary.json or vocabulary.txt (the tokens, one per id), and in faster-whisper's folders
tokenizer.json and sometimes preprocessor_config.json (copied from the original checkpoint). `read_model_bin` reads
model.bin with NumPy alone; `convert_ct2_whisper` writes the checkpoint folder that transformers and specdec-export
load (config.json, model.safetensors in fp32, generation_config.json, tokenizer.json, tokenizer_config.json,
preprocessor_config.json); `cached_conversion` does that once per model into a cache.

model.bin (CTranslate2's writer: python/ctranslate2/specs/model_spec.py, `_serialize`), little-endian:

    u32 binary version (1..6)
    version >= 2: string spec name ("WhisperSpec"), u32 spec revision
    u32 variable count, then per variable:
        string name, u8 rank, rank x u32 dims,
        version >= 4: u8 type (0 float32, 1 int8, 2 int16, 3 int32, 4 float16, 5 bfloat16), u32 byte count
        version <= 3: u8 item size (4 float32, 2 int16, 1 int8), u32 item count
        the bytes
    version >= 3: u32 alias count, then per alias: string alias, string name of the variable it stands for
    string = u16 length (with the NUL), the UTF-8 bytes, NUL

Equal variables are stored once and aliased (a tied output projection, every zero bias, every fresh layer norm);
int8/int16 weights carry a `<name>_scale` variable each. bfloat16 is read widened to float32 (exact).

The weight mapping (CTranslate2 name -> WhisperForConditionalGeneration parameter; `model.` prefix left out):

    encoder/conv1|conv2/{weight,bias}                      encoder.conv1|conv2.{weight,bias}   (same layout)
    encoder/position_encodings/encodings                   encoder.embed_positions.weight
    encoder/layer_norm/{gamma,beta}                        encoder.layer_norm.{weight,bias}
    encoder/layer_i/self_attention/linear_0                encoder.layers.i.self_attn.{q,k,v}_proj: rows split
                                                           in three; the k third of the bias is zero (k_proj has
                                                           none; CTranslate2 fills it with zeros when fusing)
    encoder/layer_i/self_attention/linear_1                encoder.layers.i.self_attn.out_proj
    encoder/layer_i/self_attention/layer_norm              encoder.layers.i.self_attn_layer_norm
    encoder/layer_i/ffn/linear_0|linear_1|layer_norm       encoder.layers.i.fc1|fc2|final_layer_norm
    decoder/embeddings/weight                              decoder.embed_tokens.weight
    decoder/position_encodings/encodings                   decoder.embed_positions.weight
    decoder/layer_norm                                     decoder.layer_norm
    decoder/layer_i/self_attention/...                     as the encoder's, under decoder.layers.i
    decoder/layer_i/attention/linear_0                     decoder.layers.i.encoder_attn.q_proj
    decoder/layer_i/attention/linear_1                     decoder.layers.i.encoder_attn.{k,v}_proj (split in two)
    decoder/layer_i/attention/linear_2                     decoder.layers.i.encoder_attn.out_proj
    decoder/layer_i/attention/layer_norm                   decoder.layers.i.encoder_attn_layer_norm
    decoder/projection/weight                              proj_out.weight (tied to the embeddings when equal)
    linear weight/bias, layer norm gamma/beta              weight/bias

The scalars (encoder/num_heads, decoder/num_heads) give the head counts; decoder/activation (GELU), pre_norm (on),
scale_embeddings, alibi and start_from_zero_embedding (off) are checked, as any other nonzero setting: a model
transformers' Whisper cannot express is refused, never approximated. The rest of the model config comes from the
shapes: d_model and num_mel_bins from conv1, the FFN widths from fc1, the layer counts, max_source_positions and
max_target_positions from the position tables, vocab_size from the embeddings. float16 (and bfloat16) weights
become float32 exactly; int8/int16 (quantized) folders are refused, since their float weights are gone.

CTranslate2's config.json and vocabulary -> generation_config.json:

    suppress_ids -> suppress_tokens, suppress_ids_begin -> begin_suppress_tokens, alignment_heads -> alignment_heads
    lang_ids -> lang_to_id ({token: id}), with task_to_id {"transcribe", "translate"} (multilingual models only)
    <|startoftranscript|> -> decoder_start_token_id; <|endoftext|> -> eos, pad and bos token ids (as Whisper's)
    <|notimestamps|> -> no_timestamps_token_id, <|startofprev|> -> prev_sot_token_id
    is_multilingual: for OpenAI's vocabularies (>= 51,864 ids) CTranslate2's own rule, at least 51,865 ids (an
        English-only .en model's config.json lists lang_ids too, which CTranslate2 and faster-whisper ignore);
        for other vocabularies: lang_ids is not empty

The tokenizer is the folder's tokenizer.json, checked id by id against the vocabulary; tokens the vocabulary has
past its end (the timestamp tokens, missing from older tokenizer.json files) are added at their ids. It is saved as a
plain fast tokenizer (tokenizer_config.json: PreTrainedTokenizerFast, <|endoftext|> as eos/pad/bos/unk, as
CTranslate2 uses it), so it tokenizes exactly as faster-whisper does. The feature extractor is the folder's
preprocessor_config.json, else WhisperFeatureExtractor's defaults with the model's mel bins and window.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from specdec.runtime.core.errors import SpecdecError, first_line

BINARY_VERSIONS = range(1, 7)            # the model.bin layouts this reader knows (faster-whisper, CTranslate2 4.x: 6)
WHISPER_SPEC = "WhisperSpec"
WHISPER_REVISION = 3                     # the newest WhisperSpec weight layout this reader knows
CONVERSION_VERSION = 1                   # bump when the converted folder changes: cached conversions are redone
STAMP = ".specdec-ct2-complete.json"     # written last into a cached conversion

# CTranslate2's DataType ids (include/ctranslate2/types.h); bfloat16 has no NumPy type and is widened on reading
_TYPES = {0: ("float32", "<f4"), 1: ("int8", "i1"), 2: ("int16", "<i2"), 3: ("int32", "<i4"),
          4: ("float16", "<f2"), 5: ("bfloat16", "<u2")}
_OLD_TYPES = {4: 0, 2: 2, 1: 1}           # binary version <= 3: item size -> type id
_MAX_RANK = 8

_SPEC_KINDS = {
    "TransformerSpec": "an encoder-decoder Transformer (Marian/OPUS-MT, NLLB, M2M-100, BART, T5, ...)",
    "TransformerDecoderModelSpec": "a decoder-only language model (GPT-2, Llama, Mistral, ...)",
    "TransformerEncoderModelSpec": "an encoder-only model (BERT, ...)",
    "Wav2Vec2Spec": "a Wav2Vec2 speech encoder",
    "Wav2Vec2BertSpec": "a Wav2Vec2-BERT speech encoder",
}

# Decoder settings a transformers Whisper has (GELU is CTranslate2's Activation.GELU = 3); any other value is refused
_FIXED = {"decoder/activation": 3, "decoder/pre_norm": 1, "decoder/scale_embeddings": 0, "decoder/alibi": 0,
          "decoder/start_from_zero_embedding": 0}
# Scalars read elsewhere or without effect on the weights' math (the decoder's attention-output options)
_KNOWN_SCALARS = {"encoder/num_heads", "decoder/num_heads", "decoder/alignment_layer", "decoder/alignment_heads",
                  "decoder/alibi_use_positive_positions", "decoder/scale_alibi"}

ENGLISH_ONLY_VOCAB = 51_864              # OpenAI's .en vocabularies; the multilingual ones have 51,865 or more
_TIMESTAMP = re.compile(r"<\|\d+\.\d\d\|>")
_REFETCH = "fetch (or convert) the CTranslate2 folder again"


def is_ct2_folder(path) -> bool:
    """`path` is a local directory holding a CTranslate2 model (model.bin and config.json), as faster-whisper's
    folders are; a transformers checkpoint (model.safetensors / pytorch_model.bin) is not."""
    try:
        folder = Path(path)
        return folder.is_dir() and (folder / "model.bin").is_file() and (folder / "config.json").is_file()
    except (OSError, TypeError, ValueError):
        return False


# -- model.bin ---------------------------------------------------------------------------------------------------------

@dataclass
class ModelBin:
    """A model.bin as read: spec name and revision, the variables (NumPy arrays over the file, read-only; scalars
    0-d), aliases (alias -> the variable it stands for) and each variable's CTranslate2 type name."""

    path: Path
    version: int
    spec: str
    revision: int
    variables: dict = field(default_factory=dict)
    aliases: dict = field(default_factory=dict)
    types: dict = field(default_factory=dict)


class _Reader:
    """Walks a model.bin mapped read-only into memory; every read past its end is a one-line 'truncated' error."""

    def __init__(self, path: Path, data: np.ndarray):
        self.path, self.data, self.size, self.offset = path, data, len(data), 0

    def take(self, count: int, what: str) -> np.ndarray:
        end = self.offset + count
        if end > self.size:
            raise SpecdecError(f"'{self.path}' is truncated (read {self.size} of at least {end} bytes: it ends inside "
                               f"{what})", _REFETCH)
        chunk = self.data[self.offset:end]
        self.offset = end
        return chunk

    def number(self, fmt: str, what: str) -> int:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what).tobytes())[0]

    def string(self, what: str) -> str:
        length = self.number("<H", what)
        raw = self.take(length, what).tobytes()
        if length == 0 or raw[-1] != 0:
            self.corrupt(f"{what} is not a NUL-terminated string")
        try:
            return raw[:-1].decode("utf-8")
        except UnicodeDecodeError:
            self.corrupt(f"{what} is not UTF-8")

    def corrupt(self, why: str):
        raise SpecdecError(f"'{self.path}' is not a readable CTranslate2 model.bin ({why}, at byte {self.offset})",
                           _REFETCH)


def _model_bin_path(path) -> Path:
    path = Path(path)
    return path / "model.bin" if path.is_dir() else path


def _read(path) -> ModelBin:
    path = _model_bin_path(path)
    if not path.is_file():
        raise SpecdecError(f"'{path}' does not exist: a CTranslate2 folder holds its weights in model.bin", _REFETCH)
    size = path.stat().st_size
    if size == 0:
        raise SpecdecError(f"'{path}' is truncated (read 0 of at least 4 bytes: it is empty)", _REFETCH)
    try:
        data = np.memmap(path, dtype=np.uint8, mode="r")
    except (OSError, ValueError) as err:
        raise SpecdecError(f"'{path}' cannot be read ({first_line(err)})", _REFETCH) from None
    rd = _Reader(path, data)

    version = rd.number("<I", "the binary version")
    if version not in BINARY_VERSIONS:
        if 6 < version < 1000:
            raise SpecdecError(f"'{path}' was written by a newer CTranslate2 (binary version {version}; this reader "
                               f"knows 1 to {BINARY_VERSIONS[-1]})", "convert the checkpoint with CTranslate2 4.x")
        rd.corrupt(f"binary version {version}: not a CTranslate2 model")
    spec, revision = ("", 1) if version < 2 else (rd.string("the spec name"), rd.number("<I", "the spec revision"))
    model = ModelBin(path, version, spec, revision)

    for index in range(rd.number("<I", "the variable count")):
        what = f"variable {index}"
        name = rd.string(f"the name of {what}")
        what = f"variable '{name}'"
        rank = rd.number("<B", f"the rank of {what}")
        if rank > _MAX_RANK:
            rd.corrupt(f"{what} has rank {rank}")
        shape = tuple(rd.number("<I", f"the shape of {what}") for _ in range(rank))
        if version >= 4:
            type_id = rd.number("<B", f"the type of {what}")
            nbytes = rd.number("<I", f"the size of {what}")
        else:
            item = rd.number("<B", f"the item size of {what}")
            type_id = _OLD_TYPES.get(item, -1)
            nbytes = rd.number("<I", f"the size of {what}") * item
        if type_id not in _TYPES:
            rd.corrupt(f"{what} has an unknown type ({type_id})")
        type_name, dtype = _TYPES[type_id]
        count = int(np.prod(shape, dtype=np.int64))
        if nbytes != count * np.dtype(dtype).itemsize:
            rd.corrupt(f"{what} of shape {list(shape)} ({type_name}) says it holds {nbytes} bytes")
        if name in model.variables:
            rd.corrupt(f"{what} is stored twice")
        array = rd.take(nbytes, f"the values of {what}").view(dtype).reshape(shape)
        if type_name == "bfloat16":      # the upper half of a float32: widening is exact
            array = (array.astype(np.uint32) << 16).view(np.float32)
        model.variables[name], model.types[name] = array, type_name

    if version >= 3:
        for index in range(rd.number("<I", "the alias count")):
            alias = rd.string(f"alias {index}")
            model.aliases[alias] = rd.string(f"the target of alias '{alias}'")
    if rd.offset != size:
        rd.corrupt(f"{size - rd.offset} bytes follow its last entry")
    return model


def read_model_bin(path) -> tuple[str, dict, dict]:
    """CTranslate2's model.bin (`path`: the file or its folder), read with NumPy alone: (spec name, e.g.
    "WhisperSpec" ("" for binary version 1), {name: array}, {alias: name of the variable it stands for}).

    The arrays are read-only views of the file in its stored type (float32, float16, int8, int16, int32; bfloat16
    widened exactly to float32); quantized weights come with their `<name>_scale` variables; scalars are 0-d arrays.
    A missing, truncated or corrupt file raises SpecdecError naming it."""
    model = _read(path)
    return model.spec, model.variables, model.aliases


# -- the checkpoint folder ---------------------------------------------------------------------------------------------

def _ct2_folder(path) -> Path:
    folder = Path(path)
    if not folder.is_dir():
        raise SpecdecError(f"'{path}' is not a directory: a CTranslate2 Whisper model is a folder (model.bin, "
                           "config.json, vocabulary, tokenizer.json)", "pass the folder of the converted model")
    for name in ("model.bin", "config.json"):
        if not (folder / name).is_file():
            raise SpecdecError(f"'{folder}' has no {name}: it is not a CTranslate2 model folder",
                               f"{_REFETCH} (model.bin, config.json, vocabulary and tokenizer.json)")
    return folder


def _check_whisper(model: ModelBin, folder: Path) -> None:
    """Refuse what is not a float Whisper: another spec, a newer layout, quantized weights."""
    if model.spec != WHISPER_SPEC:
        kind = _SPEC_KINDS.get(model.spec, "not a Whisper model")
        shown = model.spec or "unnamed (binary version 1)"
        raise SpecdecError(f"'{folder}' holds a CTranslate2 {shown} model ({kind}), not Whisper: only CTranslate2 "
                           "Whisper folders (WhisperSpec, faster-whisper's format) are read",
                           "pass a faster-whisper / CTranslate2 Whisper folder, or the original transformers "
                           "checkpoint folder of other models")
    if model.revision > WHISPER_REVISION:
        raise SpecdecError(f"'{folder}' was written by a newer CTranslate2 (WhisperSpec revision {model.revision}; "
                           f"this reader knows up to {WHISPER_REVISION})", "convert the checkpoint with "
                           "CTranslate2 4.x")
    weights = {model.types[n] for n, v in model.variables.items() if n.endswith("weight") and v.ndim > 0}
    quantized = weights & {"int8", "int16"}
    if quantized:
        kind = "int16" if "int16" in quantized else "int8"
        if kind == "int8":
            others = {model.types[n] for n, v in model.variables.items()
                      if v.ndim > 0 and not n.endswith(("weight", "_scale"))}
            kind += next((f"_{t}" for t in ("float16", "bfloat16") if t in others), "")
        raise SpecdecError(f"'{folder}' holds {kind} weights (quantized by ct2-transformers-converter --quantization "
                           f"{kind}): specdec needs the float weights",
                           "convert the checkpoint again without --quantization, or with float16/float32")


class _Variables:
    """The model's variables by name, aliases followed; remembers what was read so nothing goes unmapped."""

    def __init__(self, model: ModelBin):
        self.model, self.used = model, set()

    def get(self, name: str, required: bool = True):
        seen = name
        for _ in range(len(self.model.aliases) + 1):
            if name not in self.model.aliases:
                break
            self.used.add(name)
            name = self.model.aliases[name]
        else:
            self.corrupt(f"its aliases of '{seen}' form a loop")
        if name not in self.model.variables:
            if required:
                self.corrupt(f"it has no variable '{seen}'")
            return None
        self.used.add(name)
        return self.model.variables[name]

    def has(self, name: str) -> bool:
        return name in self.model.variables or name in self.model.aliases

    def scalar(self, name: str):
        value = self.model.variables.get(name)
        return None if value is None or value.ndim else value.item()

    def corrupt(self, why: str):
        raise SpecdecError(f"'{self.model.path}' is not a Whisper model this reader knows ({why})",
                           "convert the original transformers checkpoint with specdec-export instead, or fetch the "
                           "CTranslate2 folder again")

    def unused(self) -> list:
        names = [n for n, v in self.model.variables.items() if v.ndim and n not in self.used]
        return sorted(names + [a for a in self.model.aliases if a not in self.used])


def _count_layers(names, prefix: str) -> int:
    found = {int(m.group(1)) for n in names if (m := re.match(re.escape(prefix) + r"layer_(\d+)/", n))}
    if found != set(range(len(found))):
        return -1
    return len(found)


def _shapes(var: _Variables) -> dict:
    """transformers WhisperConfig fields that the variable shapes and head-count scalars give."""
    names = list(var.model.variables) + list(var.model.aliases)
    conv1 = var.get("encoder/conv1/weight")
    d_model, mels = int(conv1.shape[0]), int(conv1.shape[1])
    fields = {"d_model": d_model, "num_mel_bins": mels,
              "encoder_layers": _count_layers(names, "encoder/"), "decoder_layers": _count_layers(names, "decoder/"),
              "vocab_size": int(var.get("decoder/embeddings/weight").shape[0]),
              "max_source_positions": int(var.get("encoder/position_encodings/encodings").shape[0]),
              "max_target_positions": int(var.get("decoder/position_encodings/encodings").shape[0])}
    if min(fields["encoder_layers"], fields["decoder_layers"]) < 1:
        var.corrupt("its encoder or decoder layers are not numbered 0, 1, 2, ...")
    for side in ("encoder", "decoder"):
        heads = var.scalar(f"{side}/num_heads")
        heads = int(heads) if heads is not None else d_model // 64      # Whisper's heads are 64 wide
        if heads < 1 or d_model % heads:
            var.corrupt(f"{side}/num_heads is {heads} for d_model {d_model}")
        fields[f"{side}_attention_heads"] = heads
        fields[f"{side}_ffn_dim"] = int(var.get(f"{side}/layer_0/ffn/linear_0/weight").shape[0])
    for name, value in var.model.variables.items():
        if value.ndim:
            continue
        expected = _FIXED.get(name, None if name in _KNOWN_SCALARS else 0)
        if expected is not None and value.item() != expected:
            var.corrupt(f"its setting {name} is {value.item()}, where transformers' Whisper has {expected}")
    return fields


def _linear(var: _Variables, src: str, dst: str, out: dict, bias: bool = True) -> None:
    out[f"{dst}.weight"] = var.get(f"{src}/weight")
    b = var.get(f"{src}/bias", required=False)
    if bias:
        out[f"{dst}.bias"] = b if b is not None else np.zeros(out[f"{dst}.weight"].shape[0], np.float32)
    elif b is not None and np.any(b):
        var.corrupt(f"{src} has a bias, which transformers' Whisper layer lacks")


def _fused(var: _Variables, src: str, dst: str, parts: tuple, out: dict) -> None:
    """A fused projection (q|k|v or k|v rows stacked) split into transformers' separate ones; k_proj has no bias,
    so the k rows of the fused bias must be zero (CTranslate2 fills them so)."""
    weight = var.get(f"{src}/weight")
    bias = var.get(f"{src}/bias", required=False)
    if weight.shape[0] % len(parts):
        var.corrupt(f"{src}/weight has {weight.shape[0]} rows, not {len(parts)} equal parts")
    rows = weight.shape[0] // len(parts)
    for i, part in enumerate(parts):
        out[f"{dst}.{part}.weight"] = weight[i * rows:(i + 1) * rows]
        piece = None if bias is None else bias[i * rows:(i + 1) * rows]
        if part == "k_proj":
            if piece is not None and np.any(piece):
                var.corrupt(f"{src}/bias is not zero on its key rows (transformers' Whisper k_proj has no bias)")
        else:
            out[f"{dst}.{part}.bias"] = piece if piece is not None else np.zeros(rows, np.float32)


def _norm(var: _Variables, src: str, dst: str, out: dict) -> None:
    out[f"{dst}.weight"] = var.get(f"{src}/gamma")
    out[f"{dst}.bias"] = var.get(f"{src}/beta")


def _state(var: _Variables, fields: dict) -> dict:
    """transformers parameter name -> array (the stored type; float32 on writing)."""
    out = {}
    for side in ("encoder", "decoder"):
        top = f"model.{side}"
        out[f"{top}.embed_positions.weight"] = var.get(f"{side}/position_encodings/encodings")
        _norm(var, f"{side}/layer_norm", f"{top}.layer_norm", out)
        for i in range(fields[f"{side}_layers"]):
            src, dst = f"{side}/layer_{i}", f"{top}.layers.{i}"
            _fused(var, f"{src}/self_attention/linear_0", f"{dst}.self_attn", ("q_proj", "k_proj", "v_proj"), out)
            _linear(var, f"{src}/self_attention/linear_1", f"{dst}.self_attn.out_proj", out)
            _norm(var, f"{src}/self_attention/layer_norm", f"{dst}.self_attn_layer_norm", out)
            if side == "decoder":
                _linear(var, f"{src}/attention/linear_0", f"{dst}.encoder_attn.q_proj", out)
                _fused(var, f"{src}/attention/linear_1", f"{dst}.encoder_attn", ("k_proj", "v_proj"), out)
                _linear(var, f"{src}/attention/linear_2", f"{dst}.encoder_attn.out_proj", out)
                _norm(var, f"{src}/attention/layer_norm", f"{dst}.encoder_attn_layer_norm", out)
            _linear(var, f"{src}/ffn/linear_0", f"{dst}.fc1", out)
            _linear(var, f"{src}/ffn/linear_1", f"{dst}.fc2", out)
            _norm(var, f"{src}/ffn/layer_norm", f"{dst}.final_layer_norm", out)
    for conv in ("conv1", "conv2"):
        _linear(var, f"encoder/{conv}", f"model.encoder.{conv}", out)
    out["model.decoder.embed_tokens.weight"] = var.get("decoder/embeddings/weight")
    _linear(var, "decoder/projection", "proj_out", out, bias=False)
    return out


def _check_state(var: _Variables, state: dict, config) -> None:
    """Every parameter of transformers' Whisper of this config is set, at its shape, and every variable is used."""
    import torch
    from transformers import WhisperForConditionalGeneration

    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in WhisperForConditionalGeneration(config).state_dict().items()}
    if config.tie_word_embeddings:
        expected.pop("proj_out.weight", None)
    missing = sorted(set(expected) - set(state))
    if missing:
        var.corrupt(f"no variable maps to {missing[0]}" + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""))
    for name, shape in expected.items():
        if tuple(state[name].shape) != shape:
            var.corrupt(f"{name} has shape {list(state[name].shape)}, transformers expects {list(shape)}")
    unused = var.unused()
    if unused:
        var.corrupt(f"variables with no transformers counterpart: {', '.join(unused[:3])}"
                    + (f" and {len(unused) - 3} more" if len(unused) > 3 else ""))


def write_safetensors(path, tensors: dict, metadata: dict | None = None) -> Path:
    """`tensors` ({name: array}) written as float32 safetensors, one tensor at a time (a large model is never held
    twice in memory). metadata {"format": "pt"} is what transformers asks of a PyTorch checkpoint."""
    header, offset = {}, 0
    for name, array in tensors.items():
        nbytes = int(np.prod(array.shape, dtype=np.int64)) * 4
        header[name] = {"dtype": "F32", "shape": [int(d) for d in array.shape],
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    header["__metadata__"] = dict(metadata or {"format": "pt"})
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    path = Path(path)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for array in tensors.values():
            f.write(np.ascontiguousarray(array, dtype="<f4").tobytes(order="C"))
    return path


# -- vocabulary, generation config, tokenizer, feature extractor -------------------------------------------------------

def _json(path: Path, what: str):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise SpecdecError(f"the {what} '{path}' is unreadable ({first_line(err)})", _REFETCH) from None


def read_vocabulary(folder) -> list:
    """CTranslate2's token list, id order: vocabulary.json (a JSON list) or vocabulary.txt (a token a line)."""
    folder = Path(folder)
    if (folder / "vocabulary.json").is_file():
        tokens = _json(folder / "vocabulary.json", "vocabulary")
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise SpecdecError(f"'{folder / 'vocabulary.json'}' is not a JSON list of tokens", _REFETCH)
        return tokens
    if (folder / "vocabulary.txt").is_file():
        try:
            text = (folder / "vocabulary.txt").read_text(encoding="utf-8")
        except (OSError, ValueError) as err:
            raise SpecdecError(f"'{folder / 'vocabulary.txt'}' is unreadable ({first_line(err)})", _REFETCH) from None
        tokens = text.split("\n")
        return tokens[:-1] if tokens and tokens[-1] == "" else tokens
    raise SpecdecError(f"'{folder}' has no vocabulary.json or vocabulary.txt (CTranslate2's token list)", _REFETCH)


def _ids(values, vocab_size: int, key: str, folder: Path) -> list:
    ids = [] if values is None else values
    if not isinstance(ids, list) or not all(isinstance(i, int) and 0 <= i < vocab_size for i in ids):
        raise SpecdecError(f"the {key} of '{folder / 'config.json'}' are not token ids below {vocab_size}", _REFETCH)
    return [int(i) for i in ids]


def _multilingual(vocabulary: list, lang_ids: list) -> bool:
    if len(vocabulary) >= ENGLISH_ONLY_VOCAB:    # OpenAI's vocabularies: CTranslate2's own rule
        return len(vocabulary) > ENGLISH_ONLY_VOCAB
    return bool(lang_ids)


def generation_config(ct2_config: dict, vocabulary: list, fields: dict, folder: Path) -> dict:
    """generation_config.json of the model: Whisper's prompt tokens from the vocabulary, the suppressed tokens,
    languages and alignment heads from CTranslate2's config.json."""
    index = {}
    for i, token in enumerate(vocabulary):
        index.setdefault(token, i)
    missing = [t for t in ("<|endoftext|>", "<|startoftranscript|>") if t not in index]
    if missing:
        raise SpecdecError(f"the vocabulary of '{folder}' has no {missing[0]} token: it is not a Whisper vocabulary",
                           _REFETCH)
    size = len(vocabulary)
    eot, sot = index["<|endoftext|>"], index["<|startoftranscript|>"]
    lang_ids = _ids(ct2_config.get("lang_ids"), size, "lang_ids", folder)
    multilingual = _multilingual(vocabulary, lang_ids)
    if multilingual and not lang_ids and "<|translate|>" in index:     # OpenAI's layout: languages after sot
        lang_ids = list(range(sot + 1, index["<|translate|>"]))
    gen = {"decoder_start_token_id": sot, "eos_token_id": eot, "pad_token_id": eot, "bos_token_id": eot,
           "suppress_tokens": _ids(ct2_config.get("suppress_ids"), size, "suppress_ids", folder),
           "begin_suppress_tokens": _ids(ct2_config.get("suppress_ids_begin"), size, "suppress_ids_begin", folder),
           "is_multilingual": multilingual, "max_length": fields["max_target_positions"],
           "forced_decoder_ids": None}
    if multilingual:
        gen["lang_to_id"] = {vocabulary[i]: i for i in lang_ids}
        gen["task_to_id"] = {task: index[f"<|{task}|>"] for task in ("transcribe", "translate")
                             if f"<|{task}|>" in index}
    if "<|notimestamps|>" in index:
        gen["no_timestamps_token_id"] = index["<|notimestamps|>"]
    if "<|startofprev|>" in index:
        gen["prev_sot_token_id"] = index["<|startofprev|>"]
    heads = ct2_config.get("alignment_heads")
    if heads is not None:
        layers, n_heads = fields["decoder_layers"], fields["decoder_attention_heads"]
        if not isinstance(heads, list) or not all(
                isinstance(h, list) and len(h) == 2 and 0 <= h[0] < layers and 0 <= h[1] < n_heads for h in heads):
            raise SpecdecError(f"the alignment_heads of '{folder / 'config.json'}' are not [layer, head] pairs of "
                               "the decoder", _REFETCH)
        gen["alignment_heads"] = [[int(a), int(b)] for a, b in heads]
    return gen


def write_tokenizer(folder: Path, vocabulary: list, out: Path) -> None:
    """The folder's tokenizer.json, checked against the vocabulary id by id (the vocabulary's tail tokens it lacks,
    the timestamps of older files, added at their ids), and a tokenizer_config.json naming the special tokens."""
    from tokenizers import AddedToken, Tokenizer

    path = folder / "tokenizer.json"
    if not path.is_file():
        raise SpecdecError(f"'{folder}' has no tokenizer.json: the vocabulary alone cannot turn text into tokens",
                           "copy the original checkpoint's tokenizer.json into the folder (faster-whisper folders "
                           "carry it: ct2-transformers-converter --copy_files tokenizer.json)")
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as err:  # noqa: BLE001 (tokenizers raises a bare Exception for a bad file)
        raise SpecdecError(f"'{path}' is not a readable tokenizer ({first_line(err)})",
                           "copy the original checkpoint's tokenizer.json again") from None
    tail = []
    for i, token in enumerate(vocabulary):
        have = tok.id_to_token(i)
        if have is None:
            tail.append((i, token))
            continue
        if tail or have != token:
            why = (f"it lacks id {tail[0][0]} ({tail[0][1]!r}) but has later ones" if tail else
                   f"id {i} is {have!r} there, {token!r} in the vocabulary")
            raise SpecdecError(f"'{path}' does not match the model's vocabulary: {why}",
                               "use the tokenizer.json of the checkpoint the folder was converted from")
    for i, token in tail:
        added = AddedToken(token, special=not _TIMESTAMP.fullmatch(token) and token.startswith("<|"),
                           normalized=bool(_TIMESTAMP.fullmatch(token)))
        (tok.add_special_tokens if added.special else tok.add_tokens)([added])
        if tok.token_to_id(token) != i:
            raise SpecdecError(f"'{path}' cannot take the vocabulary's token {token!r} at id {i}",
                               "use the tokenizer.json of the checkpoint the folder was converted from")
    if tail:
        tok.save(str(out / "tokenizer.json"))
    else:
        shutil.copyfile(path, out / "tokenizer.json")
    special = "<|endoftext|>"        # CTranslate2's unk, eos and Whisper's pad and bos
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": special, "eos_token": special,
         "pad_token": special, "unk_token": special}, indent=2) + "\n")


def write_extractor(folder: Path, fields: dict, out: Path) -> None:
    """preprocessor_config.json: the folder's (checked against the encoder's mel bins), else WhisperFeatureExtractor's
    defaults with the model's mel bins and window (2 frames of 160 samples at 16 kHz a position: 1,500 are 30 s)."""
    from transformers import WhisperFeatureExtractor

    mels = fields["num_mel_bins"]
    if (folder / "preprocessor_config.json").is_file():
        try:
            extractor = WhisperFeatureExtractor.from_pretrained(str(folder))
        except (OSError, ValueError, TypeError) as err:
            raise SpecdecError(f"'{folder / 'preprocessor_config.json'}' is unreadable ({first_line(err)})",
                               "copy the original checkpoint's preprocessor_config.json again, or remove it to "
                               "use Whisper's defaults") from None
        if extractor.feature_size != mels:
            raise SpecdecError(f"'{folder / 'preprocessor_config.json'}' makes {extractor.feature_size} mel bins, "
                               f"the encoder reads {mels}", "use the original checkpoint's preprocessor_config.json")
        shutil.copyfile(folder / "preprocessor_config.json", out / "preprocessor_config.json")
        return
    seconds = fields["max_source_positions"] * 2 * 160 // 16_000
    WhisperFeatureExtractor(feature_size=mels, chunk_length=seconds).save_pretrained(str(out))


def whisper_config(fields: dict, gen: dict, tied: bool):
    """The transformers WhisperConfig (decoding settings live in generation_config.json)."""
    from transformers import WhisperConfig

    config = WhisperConfig(**fields, activation_function="gelu", scale_embedding=False,
                           tie_word_embeddings=tied, pad_token_id=gen["pad_token_id"],
                           bos_token_id=gen["bos_token_id"], eos_token_id=gen["eos_token_id"],
                           decoder_start_token_id=gen["decoder_start_token_id"],
                           suppress_tokens=None, begin_suppress_tokens=None)
    config.architectures = ["WhisperForConditionalGeneration"]
    return config


def convert_ct2_whisper(path, out_dir) -> Path:
    """Write the transformers Whisper checkpoint folder of the CTranslate2 Whisper folder `path` into `out_dir`
    (created; its files of those names replaced): config.json, model.safetensors (fp32), generation_config.json,
    tokenizer.json + tokenizer_config.json, preprocessor_config.json. Lossless: every weight is CTranslate2's, fp16
    widened exactly. Every bad input raises a one-line SpecdecError."""
    folder = _ct2_folder(path)
    out = Path(out_dir)
    if out.resolve() == folder.resolve():
        raise SpecdecError(f"the output folder '{out}' is the CTranslate2 folder itself (its config.json would be "
                           "replaced)", "write the checkpoint into another folder")
    model = _read(folder / "model.bin")
    _check_whisper(model, folder)
    ct2_config = _json(folder / "config.json", "CTranslate2 config")
    if not isinstance(ct2_config, dict):
        raise SpecdecError(f"'{folder / 'config.json'}' is not a JSON object", _REFETCH)

    var = _Variables(model)
    fields = _shapes(var)
    state = _state(var, fields)
    vocabulary = read_vocabulary(folder)
    if len(vocabulary) != fields["vocab_size"]:
        raise SpecdecError(f"the vocabulary of '{folder}' lists {len(vocabulary)} tokens, its model.bin has "
                           f"{fields['vocab_size']} embedding rows", _REFETCH)
    gen = generation_config(ct2_config, vocabulary, fields, folder)
    embed, proj = state["model.decoder.embed_tokens.weight"], state["proj_out.weight"]
    tied = embed is proj or np.array_equal(embed, proj)
    if tied:
        del state["proj_out.weight"]       # transformers ties it to the embeddings on loading
    config = whisper_config(fields, gen, tied)
    _check_state(var, state, config)

    try:
        out.mkdir(parents=True, exist_ok=True)
        write_tokenizer(folder, vocabulary, out)
        write_extractor(folder, fields, out)
        config.save_pretrained(str(out))
        (out / "generation_config.json").write_text(json.dumps(gen, indent=2, sort_keys=True) + "\n")
        write_safetensors(out / "model.safetensors", state)
    except OSError as err:
        raise SpecdecError(f"cannot write the checkpoint into '{out}' ({first_line(err)})",
                           "pass a writable output folder with room for the fp32 weights") from None
    return out


# -- the cache ---------------------------------------------------------------------------------------------------------

_KEY_FILES = ("config.json", "tokenizer.json", "vocabulary.json", "vocabulary.txt", "preprocessor_config.json")
_EDGE = 1 << 20


def default_cache_root() -> Path:
    """$SPECDEC_CACHE/ct2, else ~/.cache/specdec/ct2."""
    root = os.environ.get("SPECDEC_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "specdec") / "ct2"


def conversion_key(path) -> str:
    """A digest that changes when the folder does: model.bin's path, size, mtime and first and last MiB, and the
    small files whole (a few MB; no read of the whole weights)."""
    folder = _ct2_folder(path)
    weights = folder / "model.bin"
    stat = weights.stat()
    digest = hashlib.sha256(f"specdec-ct2-whisper {CONVERSION_VERSION}\n{weights.resolve()}\n{stat.st_size}\n"
                            f"{stat.st_mtime_ns}\n".encode())
    with open(weights, "rb") as f:
        digest.update(f.read(_EDGE))
        if stat.st_size > _EDGE:
            f.seek(max(_EDGE, stat.st_size - _EDGE))
            digest.update(f.read())
    for name in _KEY_FILES:
        file = folder / name
        digest.update(f"\n{name}\n".encode())
        digest.update(file.read_bytes() if file.is_file() else b"-")
    return digest.hexdigest()


def cached_conversion(path, cache_root=None) -> Path:
    """The converted checkpoint folder of the CTranslate2 Whisper folder `path`, in the cache (`cache_root`, default
    default_cache_root()): an earlier complete conversion of the same folder is reused (conversion_key); otherwise
    the conversion is written into a temporary folder beside it and renamed into place with its stamp, so an
    interrupted conversion is never taken for a complete one."""
    folder = _ct2_folder(path)
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    key = conversion_key(folder)
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", folder.resolve().name).strip("._") or "model"
    target = root / f"{name}-{key[:16]}"
    if (target / STAMP).is_file():
        return target
    try:
        root.mkdir(parents=True, exist_ok=True)
        _remove_stale(root, target.name)
        work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=root))
    except OSError as err:
        raise SpecdecError(f"cannot write the conversion cache '{root}' ({first_line(err)})",
                           "set SPECDEC_CACHE to a writable folder") from None
    try:
        convert_ct2_whisper(folder, work)
        stamp = {"version": CONVERSION_VERSION, "key": key, "source": str(folder.resolve()),
                 "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
        (work / STAMP).write_text(json.dumps(stamp, indent=1) + "\n")
        try:
            work.rename(target)
        except OSError:
            if not (target / STAMP).is_file():     # not another process's complete conversion: a stray folder
                raise SpecdecError(f"the cache folder '{target}' exists but holds no complete conversion",
                                   "remove it and run again") from None
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return target


def _remove_stale(root: Path, name: str, age_s: float = 86_400) -> None:
    """Remove partial conversions of `name` left a day ago or longer by a killed process."""
    now = time.time()
    for stale in root.glob(f".{name}.*.partial"):
        try:
            if now - stale.stat().st_mtime > age_s:
                shutil.rmtree(stale, ignore_errors=True)
        except OSError:
            pass
