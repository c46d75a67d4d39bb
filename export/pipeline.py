"""Export a target/draft pair into one export directory: graphs with their speculative heads, tokenizer, parity
check, manifest. What differs between model families (loading, graph writers, parity probe, refused options,
manifest entries) is asked of the pair's family (export/families/), chosen once from the target's config."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from specdec.runtime.core.errors import SpecdecError
from specdec.runtime.core.graph_io import TREE_INPUTS, TREE_OUTPUTS
from specdec.runtime.loading.manifest import MANIFEST

MARKER = ".specdec-export"      # written first, so --force knows the directory is ours to replace
# int8: int8 weights, float32 activations and KV cache; int8-wo: weight-only int8, drafts only (export/quantize.py)
DTYPES = ("fp32", "fp16", "int8", "int8-wo")
SINGLE_FILE_LIMIT = 1_800_000_000   # protobuf's 2 GB cap: larger graphs keep weights in one .data file
DATASTORE = "datastore.sdds"


@dataclass
class ExportOptions:
    target: str
    draft: str | None             # None: a target-only export (decoding uses the lookup, no draft model)
    out: Path
    gamma_max: int = 8
    max_length: int | None = None     # None: DEFAULT_MAX_LENGTH, or the models' own decoder positions if fewer
    dtype: str = "fp32"
    force: bool = False
    opset: int = 17
    more_drafts: dict = None      # name -> checkpoint: further draft models (chain levels), e.g. {"mid": "t5-base"}
    draft_dtype: str | None = None    # the draft models' weights (None: as dtype), e.g. int8 drafts for an fp32 target
    datastore: list = None        # text files (one segment a line, or .jsonl) indexed into datastore.sdds
    datastore_field: str | None = None    # the field of .jsonl datastore files that holds the text
    skip_check: str = ""          # a reason to skip the parity check, kept in the manifest (the bench's random
    #                               models at sizes whose float64 reference does not fit in memory); never for users
    graph_capture: bool = False   # also the graphs CUDA can capture (export/capture.py), beside the eager ones
    capture_attention: str = "plain"   # their attention: "plain" MatMuls and Softmax, or "fused" MultiHeadAttention
    draft_vocab: int | None = None     # the drafts' output rows: the K most frequent tokens (export/draft_vocab.py)
    draft_vocab_text: list = None      # the text they are counted in (None: the datastore's text)

    def roles(self) -> dict:
        drafts = {"draft": self.draft} if self.draft is not None else {}
        return {"target": self.target, **drafts, **(self.more_drafts or {})}

    def weights(self, role: str) -> str:
        """fp32, fp16, int8 or int8-wo: the weights of a role's graphs."""
        return self.dtype if role == "target" or self.draft_dtype is None else self.draft_dtype

    @property
    def activations(self) -> str:
        """The pair's activation and KV-cache dtype (the manifest's `dtype`): int8 weights run in fp32."""
        return "fp16" if self.dtype == "fp16" else "fp32"


def bundled_datastore() -> list:
    """The text the bundled pair's export indexes by default: models/datastore/ (the training split's target side,
    written by the models recipe); [] when it is not there."""
    import specdec.models

    folder = Path(specdec.models.__file__).parent / "datastore"
    return sorted(str(p) for p in folder.glob("*.txt*")) if folder.is_dir() else []


def bundled_pair() -> tuple[str, str]:
    """The project's own trained pair in models/ (the offline default)."""
    import specdec.models

    root = Path(specdec.models.__file__).parent
    target, draft = root / "target", root / "draft"
    if not (target / "config.json").is_file() or not (draft / "config.json").is_file():
        raise SpecdecError(f"the bundled pair is not in {root} (models/target and models/draft are missing)",
                           "pass --target and --draft, or train the pair with `specdec-models` (models/README.md)")
    return str(target), str(draft)


RESERVED = ("target", "none", "auto", "lookup")
DEFAULT_MAX_LENGTH = 256        # --max-length when not given, for models without learned positions (T5)


def resolved_max_length(opts: ExportOptions, configs: dict) -> int:
    """The export's max_length: --max-length when given (refused past the models' decoder positions), else the
    models' own decoder positions (the fewest among the pair's models: 448 in OpenAI's), or DEFAULT_MAX_LENGTH for
    models without learned positions (T5: relative positions), capped at what an export holds."""
    from specdec.runtime.loading.schema import TOP

    limits = [c.max_target_positions for c in configs.values() if getattr(c, "max_target_positions", None)]
    most = min(limits, default=None)
    if opts.max_length is None:
        length = DEFAULT_MAX_LENGTH if most is None else min(most, TOP["max_length"].limits[1])
        if length < opts.gamma_max + 2:
            raise SpecdecError(f"the models' {length} decoder positions leave no room for gamma_max "
                               f"{opts.gamma_max} + 1 verify tokens", f"use --gamma-max {max(1, length - 2)} or less")
        return length
    if most is not None and opts.max_length > most:
        raise SpecdecError(f"--max-length {opts.max_length} is more than the {most} decoder positions the models "
                           "have", f"use --max-length {most} or less, or leave it out to take the models' limit")
    return opts.max_length


def validate_options(opts: ExportOptions) -> None:
    import re

    for name in opts.more_drafts or {}:
        if not re.fullmatch(r"[a-z][a-z0-9_-]{0,31}", name) or name in RESERVED or name == "draft":
            raise SpecdecError(f"draft name {name!r} is not allowed",
                               "use a short lower-case name (letters, digits, _ or -) other than "
                               f"{', '.join(RESERVED)} and draft, e.g. --draft mid=t5-base")
    from specdec.runtime.loading.schema import TOP      # what a manifest may hold, so that the export loads

    most_gamma, most_length = TOP["gamma_max"].limits[1], TOP["max_length"].limits[1]
    if not 1 <= opts.gamma_max <= most_gamma:
        raise SpecdecError(f"--gamma-max must be in 1..{most_gamma} (got {opts.gamma_max})", "use e.g. --gamma-max 8")
    if opts.max_length is not None and opts.max_length > most_length:
        raise SpecdecError(f"--max-length {opts.max_length} is more than an export holds ({most_length})",
                           f"use --max-length {most_length} or less")
    if opts.max_length is not None and opts.max_length < opts.gamma_max + 2:
        raise SpecdecError(f"--max-length {opts.max_length} leaves no room for gamma_max {opts.gamma_max} + 1 "
                           "verify tokens", "use --max-length 256 or more")
    for flag, value in (("--dtype", opts.dtype), ("--draft-dtype", opts.draft_dtype)):
        if value is not None and value not in DTYPES:
            raise SpecdecError(f"{flag} must be one of {', '.join(DTYPES)} (got {value})")
    if opts.dtype == "int8-wo":
        raise SpecdecError("--dtype int8-wo is for drafts only: weight-only int8 kernels give a verify run other "
                           "logits than one-token steps, so an int8-wo target would not reproduce its own output",
                           "use --dtype int8, or --draft-dtype int8-wo with an fp32 or int8 target")
    from specdec.runtime.tools.datastore_build import check_text

    for text in opts.datastore or []:         # before any model is loaded: a typo costs seconds, not an export
        check_text(text, opts.datastore_field, "--datastore-text file", "--datastore-text-field")
    if opts.draft_vocab is not None:
        if len(opts.roles()) == 1:
            raise SpecdecError("--draft-vocab restricts a draft model's output rows, and this export has no draft "
                               "model", "add --draft, or leave --draft-vocab out")
        if opts.draft_vocab < 1:
            raise SpecdecError(f"--draft-vocab must be 1 or more (got {opts.draft_vocab})", "use e.g. --draft-vocab 8000")
        if not vocab_texts(opts):
            raise SpecdecError("--draft-vocab needs text to count the tokens in",
                               "pass --draft-vocab-text FILE (text in the output's language), or --datastore-text")
        for text in opts.draft_vocab_text or []:
            check_text(text, opts.datastore_field, "--draft-vocab-text file", "--datastore-text-field")
    if opts.capture_attention not in CAPTURE_ATTENTION:
        raise SpecdecError(f"--capture-attention must be one of {', '.join(CAPTURE_ATTENTION)} (got "
                           f"{opts.capture_attention})")
    if opts.capture_attention != "plain" and not opts.graph_capture:
        raise SpecdecError("--capture-attention is for the capturable graphs", "add --graph-capture")
    if opts.graph_capture:
        odd = sorted({opts.weights(role) for role in opts.roles()} - {"fp32", "fp16"})
        if odd:
            raise SpecdecError(f"--graph-capture with {odd[0]} weights: the capturable graphs are for the GPU, in "
                               "fp32 or fp16", "use --dtype fp16 (or fp32) for every model with --graph-capture")
    draft = opts.weights("draft")
    if ("fp16" in (opts.dtype, draft)) and opts.dtype != draft:
        raise SpecdecError(f"--dtype {opts.dtype} with --draft-dtype {draft}: the pair shares one KV-cache dtype, "
                           "fp16 for fp16 models and fp32 for fp32 and int8 ones",
                           "use --dtype fp16 for both, or mix only fp32 and int8 (e.g. --draft-dtype int8)")


def vocab_texts(opts: ExportOptions) -> list:
    """The text files --draft-vocab counts tokens in: --draft-vocab-text, else the datastore's text."""
    return list(opts.draft_vocab_text or opts.datastore or [])


def restrict_drafts(opts: ExportOptions, sources: dict, bar) -> dict:
    """With --draft-vocab, each draft model's output projection over the chosen rows only (export/draft_vocab.py);
    returns {role: the manifest's vocabulary entry}."""
    if opts.draft_vocab is None:
        return {}
    from specdec.runtime.tools.datastore_build import read_segments

    from . import draft_vocab

    target = sources["target"]
    texts = vocab_texts(opts)
    segments = (s for text in texts for s in read_segments(text, opts.datastore_field))
    ids = draft_vocab.choose(target.tokenizer, target.config, segments, opts.draft_vocab,
                             target.config.vocab_size)
    for role, source in sources.items():
        if role != "target":
            draft_vocab.restrict(source.model, ids)
    bar.write(f"  drafts: output rows {len(ids):,} of {target.config.vocab_size:,} (the {opts.draft_vocab:,} most "
              f"frequent tokens of {', '.join(Path(t).name for t in texts)}, and the specials)")
    return {role: draft_vocab.entry(ids, opts.draft_vocab, [Path(t).name for t in texts])
            for role in sources if role != "target"}


def quantize_stage(opts: ExportOptions, role: str, stage: str, path: Path, sizes: dict,
                   int8_stages=("encoder", "decoder")) -> dict | None:
    """Quantize a freshly written graph as its role's weights ask; returns what the manifest records about it: the
    method and, for int8, the MatMul nodes left in float32 (`float32_matmuls`). A target in int8 keeps its first
    encoder block's self-attention value and output projections (encoder_float_nodes), its first decoder block and
    its output projection (target_float_nodes) in float32 (export/quantize.py); a draft is quantized whole.
    `sizes`: the model's manifest architecture entry (its encoder `layers`, `decoder_layers` and `vocab_size`);
    `int8_stages`: the graphs int8 quantizes (the family's own: one may keep its decoders in fp32)."""
    from .quantize import (WO_ACCURACY, WO_BITS, WO_BLOCK, direct_weights, encoder_float_nodes, quantize_int8,
                           quantize_weight_only, target_float_nodes)

    weights, what = opts.weights(role), f"{role} {stage}"
    if weights == "int8" and stage not in int8_stages:
        return None
    if weights in ("int8", "int8-wo"):
        direct_weights(path)         # shared weights reach their MatMuls through Identity nodes, which quantizers skip
    if weights == "int8-wo":
        quantize_weight_only(path, what)
        return {"method": "weight-only MatMulNBits", "bits": WO_BITS, "block_size": WO_BLOCK,
                "accuracy_level": WO_ACCURACY}
    if weights != "int8":
        return None
    if role != "target":
        keep = []
    elif stage == "encoder":
        keep = encoder_float_nodes(path, sizes["layers"])
    else:
        keep = target_float_nodes(path, sizes["vocab_size"], sizes["decoder_layers"])
    record = quantize_int8(path, what, keep)
    return {"method": "dynamic MatMulInteger, per-channel weights, per-token activations",
            "float32_matmuls": keep, **record}


def prepare_out_dir(out: Path, force: bool) -> None:
    """Create `out` (or replace an earlier export with --force) and prove it is writable, before any slow work."""
    if out.exists():
        if not force:
            raise SpecdecError(f"output directory '{out}' already exists", "pass --force to replace it, or choose "
                               "another --export directory")
        if not out.is_dir():
            raise SpecdecError(f"'{out}' exists and is not a directory", "choose another --export directory")
        entries = list(out.iterdir())
        if entries and not ((out / MANIFEST).exists() or (out / MARKER).exists()):
            raise SpecdecError(f"'{out}' is not empty and is not a specdec export; --force only replaces exports",
                               "choose another --export directory or empty it yourself")
        try:
            shutil.rmtree(out)
        except OSError as err:
            raise SpecdecError(f"cannot remove '{out}' ({err.strerror})", "check its permissions") from None
    try:
        out.mkdir(parents=True)
        (out / MARKER).write_text("specdec export in progress or finished; safe to delete\n")
    except OSError as err:
        raise SpecdecError(f"output directory '{out}' is not writable ({err.strerror})",
                           "choose an --export directory where you can write") from None


def check_pair(target_cfg, draft_cfg, target_name: str, draft_name: str) -> None:
    from .families import family_of

    kinds = family_of(target_cfg, "target", target_name).name, family_of(draft_cfg, "draft", draft_name).name
    if kinds[0] != kinds[1]:
        raise SpecdecError(f"draft '{draft_name}' is a {draft_cfg.model_type} model but target '{target_name}' is "
                           f"a {target_cfg.model_type} model", f"pick a {kinds[0]} draft for a {kinds[0]} target")
    if target_cfg.vocab_size != draft_cfg.vocab_size:
        raise SpecdecError(f"draft '{draft_name}' has vocabulary size {draft_cfg.vocab_size} but target "
                           f"'{target_name}' has {target_cfg.vocab_size}",
                           "pick a draft trained with the target's tokenizer (e.g. t5-small for t5-large)")
    for key in ("decoder_start_token_id", "eos_token_id", "pad_token_id"):
        if getattr(target_cfg, key, None) != getattr(draft_cfg, key, None):
            raise SpecdecError(f"draft and target disagree on {key} ({getattr(draft_cfg, key, None)} vs "
                               f"{getattr(target_cfg, key, None)})", "pick a draft from the target's family")


def check_tokenizers(target_tok, draft_tok, target_name: str, draft_name: str) -> None:
    if target_tok.get_vocab() != draft_tok.get_vocab():
        raise SpecdecError(f"the tokenizers of '{target_name}' and '{draft_name}' differ",
                           "the draft must use exactly the target's vocabulary")


def check_vocabulary(tokenizer, config, name: str) -> int:
    """The tokenizer's size (the ids it makes): fewer than the model's rows is fine (every real T5: 32,100 for
    32,128), more is refused (runtime/loading/vocabulary.py)."""
    from specdec.runtime.loading.vocabulary import tokenizer_size

    size = tokenizer_size(tokenizer.backend_tokenizer)
    if size > config.vocab_size:
        raise SpecdecError(f"the tokenizer of '{name}' makes ids up to {size - 1}, but the model has "
                           f"{config.vocab_size} vocabulary rows (0..{config.vocab_size - 1})",
                           "pass the model's own tokenizer, saved in the checkpoint's directory")
    return size


# what the parity check's int8 lines call each kernel (runtime/engine/int8cpu.py)
KERNEL_CPUS = {"vnni": "CPUs with VNNI and ARM64", "avx2": "x86 CPUs without VNNI"}


def int8_drift(report: dict) -> bool:
    """An int8 graph's parity check failed: drift, which the export's policy accepts for drafts (the target verifies
    their guesses) and for a target with --accept-int8-drift."""
    return not report["passed"] and report["weights"] in ("int8", "int8-wo")


def verdict(role: str, report: dict) -> str:
    """The parity line's verdict: an int8 draft that drifts is not refused (the target verifies its guesses)."""
    if report["passed"]:
        return "OK"
    if role != "target" and int8_drift(report):
        return "drifts (an int8 draft cannot change the output: not refused)"
    return "FAILED"


def open_export(out: Path) -> None:
    """Open the export just written as SpeculativeDecoder.load does (checksums, tokenizer, datastore, every
    session; on the CPU), so that an export that succeeds also loads; a SpecdecError names what does not."""
    from specdec.runtime.decoder import SpeculativeDecoder

    try:
        SpeculativeDecoder.load(out, provider="cpu", threads=1)
    except SpecdecError as err:
        raise SpecdecError(f"the export was written but does not load ({err.problem}); it was removed",
                           "this is a specdec bug: please report it with the specdec-export command line") from None


def write_graph(export_fn, dest: Path) -> None:
    """Export into a scratch folder, then move one .onnx (plus one .data file past protobuf's limit) to `dest`."""
    import onnx

    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as scratch:
        tmp = Path(scratch) / dest.name
        export_fn(tmp)
        extra = [p for p in Path(scratch).iterdir() if p != tmp]
        if not extra and tmp.stat().st_size < SINGLE_FILE_LIMIT:
            os.replace(tmp, dest)
            return
        model = onnx.load(str(tmp))
        onnx.save_model(model, str(dest), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=dest.name + ".data", size_threshold=1024)


CROSS_PAD_FILE = "target/cross_pad.onnx"
CAPTURE_ATTENTION = ("plain", "fused")


def write_capture_graphs(opts: ExportOptions, model, role: str, dtype, out: Path) -> dict:
    """A model's capturable decoder and its head alone (export/capture.py), and the export's cross_pad graph with
    the target's; returns the model's graphs entries."""
    from .attention import cast_for_export
    from .capture import export_capture_decoder, export_capture_head, export_cross_pad, slots_for

    rel = {"capture_decoder": f"{role}/capture_decoder.onnx", "capture_head": f"{role}/capture_head.onnx"}
    cast = cast_for_export(model, dtype)
    write_graph(lambda p: export_capture_decoder(cast, p, dtype, opts.max_length, opts.max_length,
                                                 slots_for(opts.max_length, opts.gamma_max), opts.opset,
                                                 fused_attention=opts.capture_attention == "fused"),
                out / rel["capture_decoder"])
    export_capture_head(out / rel["capture_head"], opset=opts.opset)
    if role == "target":
        export_cross_pad(out / CROSS_PAD_FILE, dtype, opts.max_length, opts.opset)
    return rel


def capture_entry(opts: ExportOptions) -> dict:
    """The manifest's graph_capture entry: the capacities the capturable graphs were made for."""
    from .capture import slots_for

    return {"cross_pad": CROSS_PAD_FILE, "cache_capacity": opts.max_length, "source_capacity": opts.max_length,
            "token_slots": slots_for(opts.max_length, opts.gamma_max), "attention": opts.capture_attention}


def export_pair(opts: ExportOptions, log=print) -> dict:
    """Run every stage with a progress bar; returns {role: parity report}. Raises SpecdecError on bad input."""
    import time

    from tqdm import tqdm

    from specdec.runtime.core.graph_io import shared_cross

    from . import check, head, loop
    from .families import checkpoint_path, family_of, load_config
    from .manifest import write_manifest
    from .source import hub_notice

    validate_options(opts)
    names = opts.roles()
    configs, paths = {}, {}         # paths: where each checkpoint is read (a CTranslate2 folder's conversion)
    for role, name in names.items():
        notice = hub_notice(name)
        if notice:
            log(f"  {role}: {notice}")
            sys.stdout.flush()          # shown before the wait, also when stdout is a pipe
        paths[role] = checkpoint_path(name, log)
        configs[role] = load_config(paths[role], role)
    for role in names:
        if role != "target":
            check_pair(configs["target"], configs[role], opts.target, names[role])
    opts = replace(opts, max_length=resolved_max_length(opts, configs))
    family = family_of(configs["target"], "target", opts.target)        # the pair's (check_pair: the drafts' too)
    family.refuse(opts, names)
    out = Path(opts.out)
    prepare_out_dir(out, opts.force)

    import torch

    torch_dtype = {role: torch.float16 if opts.weights(role) == "fp16" else torch.float32 for role in names}
    stages = [(role, "load") for role in names] + \
        [(role, kind) for role in names for kind in ("encoder", "decoder")] + \
        [(role, "capture") for role in names if opts.graph_capture] + \
        [("pair", "tokenizer")] + [("pair", "datastore")] * bool(opts.datastore) + \
        [(role, "check") for role in names if not opts.skip_check] + [("pair", "manifest"), ("pair", "open")]
    sources, graphs, reports, quantization, shared, digests, vocabularies = {}, {}, {}, {}, [], {}, {}
    tokens = None           # the target tokenizer's size: the parity probes' ids and compared rows
    # The bar is for terminals only (disable=None: off when stderr is not a TTY); the per-stage lines below go to
    # stdout either way. On an error it is cleared, so the error stays the one line on stderr.
    bar = tqdm(total=len(stages), unit="stage", desc="specdec-export", dynamic_ncols=True, disable=None)
    try:
        for role, stage in stages:
            bar.set_postfix_str(f"{role}: {stage}")
            started = time.perf_counter()
            if stage == "load":
                sources[role] = replace(family.load(paths[role], role, configs[role]), name=names[role])
                if len(sources) == len(names):      # all loaded: which drafts keep the target's encoder
                    digests = family.encoder_digests(sources)
                    shared = family.keeps_target_encoder(digests)
                    family.check_sources(sources)
                    vocabularies = restrict_drafts(opts, sources, bar)
                if role == "target":
                    tokens = check_vocabulary(sources[role].tokenizer, configs[role], opts.target)
                else:
                    check_tokenizers(sources["target"].tokenizer, sources[role].tokenizer,
                                     opts.target, names[role])
            elif stage == "encoder" and role in shared:
                bar.write(f"  {role}: keeps the target's encoder (same weights): the target's encoder graph gives its "
                          "cross K/V")
            elif stage in ("encoder", "decoder"):
                dtype = torch_dtype[role]
                rel = f"{role}/{stage}.onnx"
                sharing = {r: sources[r].model for r in shared} if role == "target" else None
                # the target's decoder verifies token trees; a draft's proposes chains
                write_graph(family.graph_writer(sources[role], stage, dtype, opts.opset, role == "target", sharing),
                            out / rel)
                quant = quantize_stage(opts, role, stage, out / rel, family.architecture(configs[role]),
                                       family.int8_stages)
                if quant is not None:
                    quantization.setdefault(role, {})[stage] = quant
                if stage == "decoder" and role != "target":
                    loop.add_proposal_loop_file(out / rel)      # a draft's proposal in one run
                graphs.setdefault(role, {})[stage] = rel
            elif stage == "capture":
                graphs[role].update(write_capture_graphs(opts, sources[role].model, role, torch_dtype[role], out))
            elif stage == "tokenizer":
                sources["target"].tokenizer.backend_tokenizer.save(str(out / "tokenizer.json"))
            elif stage == "datastore":
                from specdec.runtime.tools.datastore_build import build

                store = build(out / DATASTORE, opts.datastore, out / "tokenizer.json", opts.datastore_field,
                              quiet=True)
                bar.write(f"  datastore: {store.tokens:,} tokens in {store.segments:,} segments, "
                          f"{store.file_bytes / 2**20:.1f} MiB")
            elif stage == "check":
                keeps = role in shared
                capture = (out / graphs[role]["capture_decoder"], out / CROSS_PAD_FILE, opts.max_length) \
                    if opts.graph_capture else None
                rep = check.check_parity(sources[role].model, out / graphs["target" if keeps else role]["encoder"],
                                         out / graphs[role]["decoder"], opts.gamma_max, opts.weights(role),
                                         probe=family.probe(sources[role]),
                                         cross_output=shared_cross(role) if keeps else None,
                                         tokens=tokens, capture=capture,
                                         columns=vocabularies[role]["ids"] if role in vocabularies else None)
                reports[role] = rep
                precision = "fp16" if opts.weights(role) == "fp16" else "fp32"     # PyTorch's own, for the tolerance
                own = rep[f"torch_{precision}_max_abs_diff"]
                bar.write(f"  {role} parity vs PyTorch float64 ({opts.weights(role)}): 1-token step at past "
                          f"{rep['past_length']}: max|dlogit| = {rep['step_max_abs_diff']:.2e}; "
                          f"{rep['verify_tokens']}-token verify: max|dlogit| = {rep['verify_max_abs_diff']:.2e}; "
                          f"PyTorch {precision}'s own "
                          f"{own if own is None else format(own, '.1e')}; "
                          f"tolerance {rep['tolerance']:.1e}; argmax agrees on {rep['argmax_agree']}/"
                          f"{rep['argmax_positions']} positions -> {verdict(role, rep)}")
                for kernel, k in rep.get("int8_kernels", {}).items():
                    bar.write(f"  {role} as {KERNEL_CPUS[kernel]} compute it: step max|dlogit| = "
                              f"{k['step_max_abs_diff']:.2e}; verify {k['verify_max_abs_diff']:.2e}; argmax agrees "
                              f"on {k['argmax_agree']}/{rep['argmax_positions']}")
                if "capture_step_max_abs_diff" in rep:
                    bar.write(f"  {role} capturable graph: step max|dlogit| = {rep['capture_step_max_abs_diff']:.2e}, "
                              f"verify {rep['capture_verify_max_abs_diff']:.2e}; against the eager graph "
                              f"{rep['capture_vs_eager_max_abs_diff']:.2e}")
                if rep["passed"] and not rep["conclusive"]:
                    fix = "prefer --dtype fp32 for it" if precision == "fp16" else \
                        "its outputs depend on rounding in any engine"
                    bar.write(f"  warning: {role}: PyTorch's own {precision}"
                              f" forward is off float64 by more than half the logit scale on this model, so the "
                              f"check cannot tell a mistake from rounding; {fix}")
            elif stage == "manifest":
                cfg = sources["target"].config
                tok = sources["target"].tokenizer
                write_manifest(
                    out,
                    models={role: {"source": sources[role].name, "revision": sources[role].revision,
                                   "architecture": family.architecture(sources[role].config),
                                   "graphs": graphs[role],
                                   "weights": opts.weights(role),
                                   **({"quantization": quantization[role]} if role in quantization else {}),
                                   **({"vocabulary": vocabularies[role]} if role in vocabularies else {})}
                            for role in names},
                    head={"candidates": head.CANDIDATES, "inputs": list(head.INPUTS),
                          "outputs": list(head.OUTPUTS),
                          "tree": {"models": ["target"], "inputs": list(TREE_INPUTS),
                                   "outputs": list(TREE_OUTPUTS)}},
                    tokenizer_file="tokenizer.json", datastore=DATASTORE if opts.datastore else None,
                    special_ids={"pad_token_id": cfg.pad_token_id, "eos_token_id": cfg.eos_token_id,
                                 "unk_token_id": tok.unk_token_id,
                                 "decoder_start_token_id": cfg.decoder_start_token_id},
                    entries=family.manifest_entries(sources, digests),
                    vocab_size=cfg.vocab_size, gamma_max=opts.gamma_max, max_length=opts.max_length,
                    dtype=opts.activations,
                    graph_capture=capture_entry(opts) if opts.graph_capture else None,
                    checks={"skipped": opts.skip_check} if opts.skip_check else reports)
                sources.clear()         # the PyTorch models: their memory goes before the export is opened
            elif stage == "open":
                open_export(out)
            bar.write(f"  {role:6s} {stage:9s} {time.perf_counter() - started:7.2f} s")
            bar.update(1)
    except BaseException:
        bar.leave = False
        shutil.rmtree(out, ignore_errors=True)        # no partial export: the directory was made (empty) above
        raise
    finally:
        bar.close()
    return reports
