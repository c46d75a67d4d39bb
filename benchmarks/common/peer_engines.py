"""The peers that run in this process, on the same checkpoints as the export: specdec itself (at a fixed gamma, or
its default), transformers' generate (greedy, or assisted by the draft) and CTranslate2 (float32 and int8); the
tokens each returns, normalized to compare with specdec's."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from specdec.runtime.core.errors import SpecdecError, first_line

CT2_COMPUTE_TYPES = ("float32", "int8")


def normalize(tokens, eos_id: int, drop_first: bool = False) -> list:
    """Generated ids up to and including the first EOS (HF: drop the decoder start token, cut the padding)."""
    out = [int(t) for t in tokens]
    if drop_first:
        out = out[1:]
    if eos_id in out:
        out = out[:out.index(eos_id) + 1]
    return out


def checkpoints(dec, target: str | None, draft: str | None) -> tuple[str, str]:
    """The checkpoints the export was made from (recorded in its manifest), unless given."""
    models = dec.manifest.models
    target = target or models["target"].source
    draft = draft or models["draft"].source
    for role, path in (("target", target), ("draft", draft)):
        if not Path(path).is_dir():
            raise SpecdecError(f"the {role} checkpoint '{path}' (from the export's manifest) is not a local "
                               "directory",
                               f"pass --{role}-checkpoint DIR with the checkpoint the export was made from")
    return target, draft


class Engine:
    name = ""
    note = ""
    own_ar = None            # the name of this engine's own autoregressive path

    def run(self, ids: list, max_new_tokens: int) -> list:
        raise NotImplementedError


class SpecdecEngine(Engine):
    """specdec greedy: the draft model at a fixed gamma (0: target only), or the default (draft and gamma "auto")."""

    def __init__(self, dec, gamma, draft: str = "draft"):
        self.dec, self.gamma, self.draft = dec, gamma, draft
        if draft == "auto":
            self.name, self.note = "specdec default", "ONNX Runtime, draft=auto gamma=auto"
        else:
            self.name = f"specdec gamma={gamma}" if gamma else "specdec gamma=0"
            self.note = "ONNX Runtime, speculative" if gamma else "ONNX Runtime, target only"
        self.own_ar = "specdec gamma=0"

    def run(self, ids, max_new_tokens):
        res = self.dec.generate(input_ids=ids, max_new_tokens=max_new_tokens, draft=self.draft, gamma=self.gamma,
                                temperature=0.0)
        return list(res.token_ids)


class HFEngine(Engine):
    def __init__(self, target, eos_id: int, assistant=None, gamma: int = 0):
        from .optimum_peer import Generate

        self.generate, self.eos_id = Generate(target, assistant, gamma), eos_id
        if assistant is not None:
            self.name = f"transformers assisted gamma={gamma}"
            self.note = "PyTorch, assistant_model=draft"
        else:
            self.name = "transformers greedy"
            self.note = "PyTorch generate"
        self.own_ar = "transformers greedy"

    def run(self, ids, max_new_tokens):
        return normalize(self.generate.run(ids, max_new_tokens), self.eos_id, drop_first=True)


class CT2Engine(Engine):
    def __init__(self, translator, tokenizer, eos_id: int, threads: int, compute_type: str = "float32",
                 vocabulary: list | None = None):
        self.translator, self.tokenizer, self.eos_id = translator, tokenizer, eos_id
        # the converted model's tokens by row (its padded rows, past the tokenizer's ids, have names of their own);
        # without its vocabulary file, the tokenizer's
        self.tokens = vocabulary or [tokenizer.id_to_token(i) for i in range(tokenizer.get_vocab_size())]
        self.rows = {t: i for i, t in enumerate(self.tokens)}
        self.compute_type = compute_type
        self.name = ct2_name(compute_type)
        self.note = (f"compute_type {compute_type}" + (" (no quantization)" if compute_type == "float32" else
                                                       " (weights quantized when loaded)")
                     + f", intra_threads {threads}")
        self.own_ar = self.name

    def run(self, ids, max_new_tokens):
        res = self.translator.translate_batch([[self.tokens[i] for i in ids]], beam_size=1,
                                              max_decoding_length=max_new_tokens, return_end_token=True)
        return normalize([self.rows[t] for t in res[0].hypotheses[0]], self.eos_id)


def load_hf(path: str):
    import torch
    import transformers
    from transformers import T5ForConditionalGeneration

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    return T5ForConditionalGeneration.from_pretrained(path, dtype=torch.float32).eval()


def cache_name(checkpoint: str) -> str:
    """NAME-PATHHASH-FILESHASH: a cache directory name that changes with the checkpoint's path and files."""
    key = hashlib.sha256(str(Path(checkpoint).resolve()).encode()).hexdigest()[:12]
    files = sorted(p for p in Path(checkpoint).iterdir() if p.is_file())
    stamp = hashlib.sha256("".join(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files)
                           .encode()).hexdigest()[:12]
    return f"{Path(checkpoint).name}-{key}-{stamp}"


def ct2_name(compute_type: str) -> str:
    return "ctranslate2 greedy" if compute_type == "float32" else f"ctranslate2 {compute_type} greedy"


def _ct2(target: str, workdir: Path, threads: int, tokenizer, eos_id: int, log, compute_type: str = "float32"):
    """A CTranslate2 translator converted (once, cached under workdir) from the target checkpoint."""
    engines, status = ct2_engines(target, workdir, threads, tokenizer, eos_id, log, (compute_type,))
    return engines.get(compute_type), status[compute_type]


def ct2_engines(target: str, workdir: Path, threads: int, tokenizer, eos_id: int, log,
                compute_types=("float32", "int8")) -> tuple[dict, dict]:
    """({compute_type: CT2Engine}, {compute_type: "ok" or why not}): the target checkpoint converted once (fp32,
    cached under workdir/ct2) and loaded at each compute_type (int8: CTranslate2 quantizes the weights when it
    loads them, the same as converting with quantization="int8")."""
    try:
        import ctranslate2
    except ImportError:
        return {}, {t: "not installed (pip install 'specdec[bench]', which brings ctranslate2)"
                    for t in compute_types}
    out = Path(workdir) / "ct2" / cache_name(target)

    def error(err):
        return f"error: {type(err).__name__}: {first_line(err, 160, '')}"

    try:
        if not (out / "model.bin").is_file():
            log(f"converting {target} to CTranslate2 (fp32) in {out}")
            from ctranslate2.converters import TransformersConverter

            TransformersConverter(target).convert(str(out), quantization=None, force=True)
    except Exception as err:     # a converter that does not know this transformers/T5 variant: say so, go on
        return {}, {t: error(err) for t in compute_types}
    engines, status = {}, {}
    for compute_type in compute_types:
        try:
            translator = ctranslate2.Translator(str(out), device="cpu", compute_type=compute_type, inter_threads=1,
                                                intra_threads=threads)
        except Exception as err:     # e.g. a compute type this CPU build does not support
            status[compute_type] = error(err)
            continue
        vocab = out / "shared_vocabulary.json"
        engines[compute_type] = CT2Engine(translator, tokenizer, eos_id, threads, compute_type,
                                          json.loads(vocab.read_text()) if vocab.is_file() else None)
        status[compute_type] = "ok"
    return engines, status
