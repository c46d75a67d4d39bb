"""The peers that run in this process, on the checkpoints the export was made from: specdec itself (at a fixed gamma,
or its default), transformers' generate (greedy, or assisted by the draft) and CTranslate2 (float32 and int8); each
returns its greedy tokens normalized to compare with specdec's."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from specdec.runtime.core.errors import SpecdecError, first_line

CT2_COMPUTE_TYPES = ("float32", "int8")


@dataclass
class Engine:
    """A peer: run(ids, max_new_tokens) -> its greedy tokens; own_ar: the name of its own autoregressive path."""
    name: str
    note: str
    own_ar: str
    run: Callable
    compute_type: str | None = None           # CTranslate2's


def error(err: BaseException) -> str:
    return f"error: {type(err).__name__}: {first_line(err, 160, '')}"


def normalize(tokens, eos_id: int, drop_first: bool = False) -> list:
    """Generated ids up to and including the first EOS (HF: drop the decoder start token, cut the padding)."""
    out = [int(t) for t in tokens][1 if drop_first else 0:]
    return out[:out.index(eos_id) + 1] if eos_id in out else out


def checkpoints(dec, target: str | None, draft: str | None) -> tuple[str, str]:
    """The checkpoints the export was made from (recorded in its manifest), unless given."""
    paths = {role: given or dec.manifest.models[role].source for role, given in (("target", target), ("draft", draft))}
    for role, path in paths.items():
        if not Path(path).is_dir():
            raise SpecdecError(f"the {role} checkpoint '{path}' (from the export's manifest) is not a local directory",
                               f"pass --{role}-checkpoint DIR with the checkpoint the export was made from")
    return paths["target"], paths["draft"]


def specdec_engine(dec, gamma, draft: str = "draft") -> Engine:
    """specdec greedy: the draft model at a fixed gamma (0: target only), or the default (draft and gamma "auto")."""
    def run(ids, max_new_tokens):
        return list(dec.generate(input_ids=ids, max_new_tokens=max_new_tokens, draft=draft, gamma=gamma,
                                 temperature=0.0).token_ids)
    if draft == "auto":
        return Engine("specdec default", "ONNX Runtime, draft=auto gamma=auto", "specdec gamma=0", run)
    return Engine(f"specdec gamma={gamma}", "ONNX Runtime, " + ("speculative" if gamma else "target only"),
                  "specdec gamma=0", run)


def hf_engine(target, eos_id: int, assistant=None, gamma: int = 0) -> Engine:
    """transformers' generate on PyTorch, greedy, or assisted by the draft at a constant gamma."""
    from .optimum_peer import Generate

    generate = Generate(target, assistant, gamma)
    name, note = (("transformers greedy", "PyTorch generate") if assistant is None else
                  (f"transformers assisted gamma={gamma}", "PyTorch, assistant_model=draft"))
    return Engine(name, note, "transformers greedy",
                  lambda ids, n: normalize(generate.run(ids, n), eos_id, drop_first=True))


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


def ct2_engines(target: str, workdir: Path, threads: int, tokenizer, eos_id: int, log,
                compute_types=CT2_COMPUTE_TYPES) -> tuple[dict, dict]:
    """({compute_type: Engine}, {compute_type: "ok" or why not}): the target checkpoint converted to CTranslate2
    once (fp32, cached under workdir/ct2) and loaded at each compute_type (int8: CTranslate2 quantizes the weights
    when it loads them, the same as converting with quantization="int8")."""
    try:
        import ctranslate2
    except ImportError:
        return {}, dict.fromkeys(compute_types, "not installed (pip install 'specdec[bench]', which brings "
                                                "ctranslate2)")
    out = Path(workdir) / "ct2" / cache_name(target)
    try:
        if not (out / "model.bin").is_file():
            log(f"converting {target} to CTranslate2 (fp32) in {out}")
            from ctranslate2.converters import TransformersConverter

            TransformersConverter(target).convert(str(out), quantization=None, force=True)
    except Exception as err:     # a converter that does not know this transformers/T5 variant: say so, go on
        return {}, dict.fromkeys(compute_types, error(err))
    # the converted model's tokens by row (its padded rows, past the tokenizer's ids, have names of their own);
    # without its vocabulary file, the tokenizer's
    vocab = out / "shared_vocabulary.json"
    tokens = (json.loads(vocab.read_text()) if vocab.is_file() else
              [tokenizer.id_to_token(i) for i in range(tokenizer.get_vocab_size())])
    rows = {t: i for i, t in enumerate(tokens)}
    engines, status = {}, {}
    for compute_type in compute_types:
        try:
            translator = ctranslate2.Translator(str(out), device="cpu", compute_type=compute_type, inter_threads=1,
                                                intra_threads=threads)
        except Exception as err:     # e.g. a compute type this CPU build does not support
            status[compute_type] = error(err)
            continue

        def run(ids, max_new_tokens, translator=translator):
            res = translator.translate_batch([[tokens[i] for i in ids]], beam_size=1,
                                             max_decoding_length=max_new_tokens, return_end_token=True)
            return normalize([rows[t] for t in res[0].hypotheses[0]], eos_id)

        name = ct2_name(compute_type)
        quantized = " (no quantization)" if compute_type == "float32" else " (weights quantized when loaded)"
        engines[compute_type] = Engine(name, f"compute_type {compute_type}{quantized}, intra_threads {threads}",
                                       name, run, compute_type)
        status[compute_type] = "ok"
    return engines, status
