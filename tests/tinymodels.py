"""Tiny random T5 checkpoints, their tokenizer, an offline hub cache and the export CLI, as plain functions.

Test modules in every folder import these directly (`from tinymodels import make_tiny_t5`); tests/conftest.py
wraps them in fixtures."""


from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from pathlib import Path

from specdec.bench.whisper_models import locked
from specdec.models import whisper_checkpoint


SPECIALS = ("<pad>", "</s>", "<unk>")     # ids 0, 1, 2; then w3, w4, ...


def tiny_vocab(vocab: int) -> dict:
    words = {tok: i for i, tok in enumerate(SPECIALS)}
    words.update({f"w{i}": i for i in range(len(SPECIALS), vocab)})
    return words


def write_tiny_tokenizer(path, vocab: int = 48, words: dict | None = None) -> Path:
    """A WordLevel tokenizer (whitespace split, `</s>` appended) saved so AutoTokenizer loads it."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = words if words is not None else tiny_vocab(vocab)
    tok = Tokenizer(models.WordLevel(vocab=words, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", words["</s>"])])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(path))
    return path


def tiny_t5_config(*, vocab=48, d_model=32, d_kv=8, heads=3, layers=2, decoder_layers=2, v11=False, d_ff=None,
                   **extra):
    """A T5Config (v1.0: ReLU FFN and scaled tied outputs; v1.1: gated-GELU, no output scaling)."""
    from transformers import T5Config

    kwargs = dict(vocab_size=vocab, d_model=d_model, d_kv=d_kv, d_ff=d_ff or 2 * d_model, num_heads=heads,
                  num_layers=layers, num_decoder_layers=decoder_layers, dropout_rate=0.0,
                  decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
                  feed_forward_proj="gated-gelu" if v11 else "relu")
    if v11:
        kwargs["tie_word_embeddings"] = False     # transformers 5: becomes scale_decoder_outputs=False
    kwargs.update(extra)
    return T5Config(**kwargs)


def tiny_t5_model(*, seed=0, bias_scale=1.0, **config_kwargs):
    """A random T5ForConditionalGeneration (fp32, eval). `bias_scale` multiplies the relative-position bias
    tables so that a position error shows up clearly in the logits."""
    import torch
    from transformers import T5ForConditionalGeneration

    config = tiny_t5_config(**config_kwargs)
    torch.manual_seed(seed)
    model = T5ForConditionalGeneration(config).eval()
    if bias_scale != 1.0:
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "relative_attention_bias" in name:
                    param.mul_(bias_scale)
    return model


def make_tiny_t5(path, *, vocab=48, d_model=32, d_kv=8, heads=3, layers=2, decoder_layers=2, v11=False, seed=0,
                 tokenizer_words: dict | None = None, tokens: int | None = None, **extra) -> Path:
    """Write a random tiny T5 checkpoint (config.json + model.safetensors, fp32) and its tokenizer to `path`.

    The tokenizer: `<pad>`=0, `</s>`=1, `<unk>`=2, then `w3` ... `w{tokens-1}`; "w5 w6" encodes to [5, 6, 1].
    `tokens` (default `vocab`): the ids the tokenizer makes; fewer than the model's `vocab` rows is the layout of
    every real T5 (32,100 ids, 32,128 rows), the rows past it padded. Config: decoder_start_token_id 0, pad 0,
    eos 1. Extra keyword arguments go to T5Config."""
    path = Path(path)
    model = tiny_t5_model(vocab=vocab, d_model=d_model, d_kv=d_kv, heads=heads, layers=layers,
                          decoder_layers=decoder_layers, v11=v11, seed=seed, **extra)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(path))
    write_tiny_tokenizer(path, tokens or vocab, tokenizer_words)
    return path


def run_export_cli(argv) -> tuple[int, str, str]:
    """specdec.export.cli.main(argv) with stdout and stderr captured: (exit code, stdout, stderr)."""
    from specdec.export.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


INT8_PAIR_SHAPE = dict(vocab=48, d_model=32, d_kv=8, heads=4)


def export_int8_pair(root: Path) -> tuple:
    """(target_dir, fp32 export, int8 export, the int8 export's stdout) under `root`: a random 3-block target (so its
    first encoder and decoder blocks stay float32 in int8) and a 1-block draft of the same vocabulary
    (INT8_PAIR_SHAPE), exported in fp32 and with --dtype int8."""
    target = make_tiny_t5(root / "target", seed=11, layers=3, decoder_layers=3, **INT8_PAIR_SHAPE)
    draft = make_tiny_t5(root / "draft", seed=12, layers=1, decoder_layers=1, **INT8_PAIR_SHAPE)
    runs = {}
    for name, flags in (("fp32", []), ("int8", ["--dtype", "int8"])):
        code, stdout, stderr = run_export_cli(["--target", target, "--draft", draft, "--export", root / name,
                                               *flags, "--gamma-max", "4", "--max-length", "32"])
        assert code == 0, stderr
        runs[name] = stdout
    return target, root / "fp32", root / "int8", runs["int8"]


# --- built once per test run, for every worker process ---------------------------------------------------------

def shared_dir(tmp_path_factory, key: str, build) -> Path:
    """The directory `key` of this test run, made by build(path) once for all worker processes: the first to ask
    builds it (holding a lock), the others wait and reuse it. A build that fails leaves nothing behind, so the next
    test that asks builds it again (and fails the same way). Under pytest-xdist each worker's basetemp is a folder
    of the run's (pytest-N/popen-gwK), so the run's folder is the one they share; with `-n 0` it is the run's own."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    root = base / "shared"
    root.mkdir(exist_ok=True)
    out, done = root / key, root / f"{key}.done"
    with locked(root / f"{key}.lock"):
        if not done.exists():
            if out.exists():
                shutil.rmtree(out)
            try:
                build(out)
            except BaseException:
                shutil.rmtree(out, ignore_errors=True)
                raise
            done.touch()
    return out


# --- an offline Hugging Face hub cache ---------------------------------------------------------------------

def fill_hub_cache(cache_dir, repo_id: str, checkpoint_dir, commit: str) -> Path:
    """Lay a checkpoint out as huggingface_hub's cache does: models--org--name/{refs/main, snapshots/<commit>/,
    blobs/} with snapshot files symlinked to blobs named by content."""
    import hashlib

    repo = Path(cache_dir) / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    for file in Path(checkpoint_dir).iterdir():
        if not file.is_file():
            continue
        data = file.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snapshot / file.name
        if link.exists() or link.is_symlink():
            link.unlink()
        link.symlink_to(os.path.relpath(blob, snapshot))
    return repo


def _hub_settings(cache_dir):
    cache_dir = str(cache_dir)
    env = {"HF_HOME": str(Path(cache_dir).parent / "hf_home"), "HF_HUB_CACHE": cache_dir,
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    consts = {"HF_HOME": env["HF_HOME"], "HF_HUB_CACHE": cache_dir, "HUGGINGFACE_HUB_CACHE": cache_dir,
              "HF_HUB_OFFLINE": True}
    return env, consts


def read_manifest(export_dir) -> dict:
    return json.loads((Path(export_dir) / "manifest.json").read_text())


def tokenizer_size(export_dir) -> int:
    """The ids an export's tokenizer makes (fewer than its model's rows in a padded pair)."""
    from tokenizers import Tokenizer

    from specdec.runtime.loading.vocabulary import tokenizer_size as size

    return size(Tokenizer.from_file(str(Path(export_dir) / "tokenizer.json")))


def random_prompts(vocab: int, count: int, seed: int = 0) -> list:
    """`count` prompts of 2..13 random ids (>= 3: no pad/eos/unk) ending in EOS (1)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(3, vocab, size=rng.integers(2, 14))] + [1] for _ in range(count)]


def noisy_copy(src, dst, noise: float, seed: int):
    """The checkpoint at `src` with Gaussian noise (relative scale `noise`) on every weight: a related draft."""
    import shutil

    import torch
    from transformers import T5ForConditionalGeneration

    model = T5ForConditionalGeneration.from_pretrained(str(src)).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(noise * param.std() * torch.randn(param.shape, generator=gen))
    model.save_pretrained(str(dst))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(src / name, dst / name)
    return dst


def export_pair(target, draft, out, *extra):
    """specdec-export --target TARGET --draft DRAFT --out OUT [extra]; asserts it succeeded; returns OUT."""
    code, stdout, stderr = run_export_cli(["--target", target, "--draft", draft, "--export", out, *extra])
    assert code == 0, stderr
    return out


def add_datastore(export_dir, segments, rel: str = "datastore.sdds") -> Path:
    """Index `segments` (token id lists) with the export's tokenizer into `rel` and list it in the manifest as the
    export's datastore (what `specdec-export --datastore` does, without re-exporting the graphs); ids past the
    tokenizer's (a padded row, which a model's output may hold and text cannot) are dropped."""
    from hostile_exports import sha256

    from specdec.runtime.tools.datastore_build import write

    export_dir = Path(export_dir)
    raw = read_manifest(export_dir)
    size = tokenizer_size(export_dir)
    segments = [[t for t in s if t < size] for s in segments]     # text holds no padded row's id (a model's output may)
    path = write(export_dir / rel, segments, size, raw["files"][raw["tokenizer"]])
    raw["datastore"] = rel
    raw["files"][rel] = sha256(path)
    (export_dir / "manifest.json").write_text(json.dumps(raw, indent=2) + "\n")
    return path


def broken_export(target_dir, export_dir, tmp_path, role="target", how="residual"):
    """A copy of the export whose `role` graph (by default the target's) is deliberately wrong: `how`="residual"
    draws from p instead of norm(max(0, p - q)) after a rejection; "one_uniform" (a draft) makes its proposal loop
    draw every step with the same uniform. The models' checkpoints sit side by side (conftest.small_vocab_pair)."""
    import shutil

    from transformers import T5ForConditionalGeneration

    from specdec.export.families.t5_decoder import export_decoder
    from specdec.export.loop import add_proposal_loop_file
    from specdec.runtime.loading.manifest import sha256_file

    broken = Path(tmp_path) / f"broken-{role}-{how}"
    shutil.copytree(export_dir, broken)
    model = T5ForConditionalGeneration.from_pretrained(str(Path(target_dir).parent / role)).eval()
    export_decoder(model, broken / f"{role}/decoder.onnx", residual=how != "residual", tree=role == "target")
    if role != "target":                 # a draft's graph carries its proposal loop (export format 4)
        add_proposal_loop_file(broken / f"{role}/decoder.onnx", one_uniform=how == "one_uniform")
    manifest = json.loads((broken / "manifest.json").read_text())
    for rel in manifest["files"]:
        manifest["files"][rel] = sha256_file(broken / rel)
    (broken / "manifest.json").write_text(json.dumps(manifest))
    return broken


# -- Whisper ------------------------------------------------------------------------------------------------------------
# A tiny Whisper vocabulary: its special tokens by name (what the export reads from the generation config), then words.
WHISPER_SPECIALS = {"<unk>": 0, "<|endoftext|>": 1, "<|startoftranscript|>": 2, "<|en|>": 3, "<|de|>": 4,
                    "<|transcribe|>": 5, "<|translate|>": 6, "<|notimestamps|>": 7}
WHISPER_SUPPRESS, WHISPER_BEGIN_SUPPRESS = [8], [1, 9]      # a word never generated; end of text and a word not first


def tiny_whisper_specials():
    """WHISPER_SPECIALS as the checkpoint writer (specdec.models.whisper_checkpoint) takes them."""
    return whisper_checkpoint.Specials(ids=dict(WHISPER_SPECIALS), unk="<unk>", start=2, eos=1,
                                       languages={"<|en|>": 3, "<|de|>": 4}, tasks={"transcribe": 5, "translate": 6},
                                       no_timestamps=7, suppress=list(WHISPER_SUPPRESS),
                                       begin_suppress=list(WHISPER_BEGIN_SUPPRESS))


def tiny_whisper_model(*, seed=0, vocab=97, position_scale=20.0, **kw):
    """A random Whisper at the official front end (80 mel bins, 1,500 encoder positions) and tiny widths, with the
    generation config of a multilingual Whisper over WHISPER_SPECIALS. `position_scale` enlarges the random
    position embeddings, so that a position read wrongly shows in the logits."""
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    torch.manual_seed(seed)
    cfg = dict(vocab_size=vocab, num_mel_bins=80, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
               decoder_attention_heads=4, d_model=32, encoder_ffn_dim=48, decoder_ffn_dim=48,
               max_source_positions=1500, max_target_positions=96, pad_token_id=1, bos_token_id=1, eos_token_id=1,
               decoder_start_token_id=2, suppress_tokens=None, begin_suppress_tokens=None)
    model = WhisperForConditionalGeneration(WhisperConfig(**{**cfg, **kw})).eval()
    with torch.no_grad():
        model.model.decoder.embed_positions.weight.mul_(position_scale)
    whisper_checkpoint.set_generation(model, tiny_whisper_specials())
    return model


def save_tiny_whisper(model, path, tokens: int | None = None) -> Path:
    """`model` saved as a checkpoint directory: weights, generation config, feature extractor, tokenizer (of
    `tokens` ids; default: every row of the model)."""
    return whisper_checkpoint.save(model, path, tiny_whisper_specials(), tokens)


WHISPER_WINDOW = dict(max_source_positions=50)      # 1 s of audio: 100 feature frames, 50 encoder positions


def noisy_whisper_draft(target, noise: float, seed: int):
    """distil-whisper's layout: the target's encoder, a perturbed copy of its decoder."""
    import copy

    import torch

    torch.manual_seed(seed)
    draft = copy.deepcopy(target)
    with torch.no_grad():
        for p in draft.model.decoder.parameters():
            if p.numel() > 1:
                p.add_(noise * p.std() * torch.randn_like(p))
    return draft


def whisper_pair_models(vocab: int, seed: int, noise: float = 0.3):
    """(target, draft) of build_whisper_pair, in memory: a tiny Whisper target with a 1-second window and its
    noisy_whisper_draft (seeded: the same models every call)."""
    target = tiny_whisper_model(seed=seed, vocab=vocab, position_scale=1.0, init_std=0.2, **WHISPER_WINDOW)
    return target, noisy_whisper_draft(target, noise, seed + 1)


def build_whisper_pair(root, vocab: int, seed: int, noise: float = 0.3, tokens: int | None = None):
    """A tiny Whisper target with a 1-second window and its noisy_whisper_draft, saved as root/target and
    root/draft, with a tokenizer of `tokens` ids (default: `vocab`); returns the target model."""
    target, draft = whisper_pair_models(vocab, seed, noise)
    save_tiny_whisper(target, Path(root) / "target", tokens)
    save_tiny_whisper(draft, Path(root) / "draft", tokens)
    return target


def exported_whisper_pair(root, vocab: int = 40, seed: int = 6, gamma_max: int = 4, max_length: int = 64,
                          noise: float = 0.3, tokens: int | None = 36, extra=()):
    """build_whisper_pair under `root`, exported to root/export (with the `extra` export arguments): (the target
    model, the export's path). The defaults are the pair the runtime, C API and serving tests share: 40 rows, of
    which the tokenizer makes 36 (rows past a tokenizer's ids are padded in real checkpoints too)."""
    target = build_whisper_pair(root, vocab=vocab, seed=seed, noise=noise, tokens=tokens)
    out = export_pair(str(Path(root) / "target"), str(Path(root) / "draft"), str(Path(root) / "export"),
                      "--gamma-max", str(gamma_max), "--max-length", str(max_length), *extra)
    return target, out


def whisper_audio(seconds: float, seed: int = 0, rate: int = 16_000):
    """A chirp with a harmonic and noise, and a silent stretch (float32 PCM)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    wave = 0.4 * np.sin(2 * np.pi * (200 + 900 * t / max(seconds, 1e-9)) * t) + 0.1 * np.sin(2 * np.pi * 3100 * t)
    wave += 0.02 * rng.standard_normal(len(t))
    wave[len(t) // 3: len(t) // 3 + rate // 4] = 0.0
    return wave.astype(np.float32)


def _all_nodes(graph):
    """The graph's nodes and those of its subgraphs (a draft's decoder is an If over its proposal loop)."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == attr.GRAPH else list(attr.graphs)):
                yield from _all_nodes(sub)


def failing_at_run_time(export, dest):
    """A copy of a tiny T5 export whose draft decoder loads but fails when it runs, its checksums rewritten (a
    corrupt but consistent export): the relative-position bias table [max_distance + 2, heads] cut to 2 rows. The
    row indices are computed at run time, so loading succeeds and the lookup fails once a query is a distance of 1
    or more from a key. Target-only requests do not touch it."""
    import json
    import shutil

    import numpy as np
    import onnx
    from onnx import numpy_helper

    from specdec.runtime.loading.manifest import sha256_file

    dest = Path(shutil.copytree(export, dest))
    path = dest / "draft" / "decoder.onnx"
    model = onnx.load(str(path))
    tables = {n.input[0] for n in _all_nodes(model.graph) if n.op_type == "Gather"}
    init = next(i for i in model.graph.initializer if i.name in tables and i.name == "bias_table")
    value = numpy_helper.to_array(init)
    init.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(value[:2]), init.name))
    onnx.save(model, str(path))
    manifest = json.loads((dest / "manifest.json").read_text())
    for rel in manifest["files"]:
        manifest["files"][rel] = sha256_file(dest / rel)
    (dest / "manifest.json").write_text(json.dumps(manifest))
    return dest


# ---------------------------------------------------------------------------------------------- Whisper with timestamps
# A tiny Whisper vocabulary laid out as Whisper's: words (0 .. 11, 0 the unknown one), end of text (12), the prompt's
# special tokens, <|notimestamps|> (18), then <|0.00|> (19) .. <|0.14|> (26), one every 0.02 s: 27 rows, the last a
# timestamp (as in Whisper v2, whose 51,865 rows are all ids; a padded row past the timestamps counts as one to the
# rules, in transformers as here).
EOT, SOT, EN, DE, TRANSCRIBE, TRANSLATE, NO_TIMESTAMPS, BEGIN, STAMPS, ROWS = 12, 13, 14, 15, 16, 17, 18, 19, 8, 27
# (not SPECIALS: that name is the T5 vocabulary's, which tiny_vocab reads when it is called)
STAMPED_SPECIALS = {"<unk>": 0, "<|endoftext|>": EOT, "<|startoftranscript|>": SOT, "<|en|>": EN, "<|de|>": DE,
                    "<|transcribe|>": TRANSCRIBE, "<|translate|>": TRANSLATE, "<|notimestamps|>": NO_TIMESTAMPS,
                    **{f"<|{i * 0.02:.2f}|>": BEGIN + i for i in range(STAMPS)}}


def stamped_specials():
    return whisper_checkpoint.Specials(ids=dict(STAMPED_SPECIALS), unk="<unk>", start=SOT, eos=EOT,
                                       languages={"<|en|>": EN, "<|de|>": DE},
                                       tasks={"transcribe": TRANSCRIBE, "translate": TRANSLATE},
                                       no_timestamps=NO_TIMESTAMPS)


def exported_stamped_whisper_pair(root, gamma_max: int = 3, max_length: int = 32):
    """A tiny Whisper pair (1 s window, STAMPS timestamp tokens, the draft a noisy copy of the target's decoder)
    saved under root/target and root/draft and exported to root/export: (target model, export path)."""
    root = Path(root)
    target = tiny_whisper_model(seed=11, vocab=ROWS, position_scale=1.0, init_std=0.2, max_source_positions=50,
                                pad_token_id=EOT, bos_token_id=EOT, eos_token_id=EOT, decoder_start_token_id=SOT)
    draft = noisy_whisper_draft(target, 1.0, 12)
    for name, model in (("target", target), ("draft", draft)):
        whisper_checkpoint.set_generation(model, stamped_specials())
        whisper_checkpoint.save(model, root / name, stamped_specials())
    return target, export_pair(str(root / "target"), str(root / "draft"), str(root / "export"), "--gamma-max",
                               str(gamma_max), "--max-length", str(max_length))
