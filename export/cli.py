"""`specdec-export`: a target and draft checkpoint of one family (hub ids or local directories) -> one export
directory."""

from __future__ import annotations

import argparse
import shutil
import sys
import warnings
from pathlib import Path

from specdec.runtime.core.errors import OneLineParser, SpecdecError, run_cli

from .families import FAMILIES, shipped_draft
from .pipeline import DEFAULT_MAX_LENGTH, ExportOptions, bundled_datastore, bundled_pair, export_pair, int8_drift


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="specdec-export",
        renamed={"--out": "--export", "--datastore": "--datastore-text", "--datastore-field": "--datastore-text-field"},
        description=f"Export a target and its drafts ({' or '.join(f.title for f in FAMILIES)}) to ONNX graphs with "
                    "KV-cache I/O and a fused sampling head, the tokenizer and a manifest. With neither --target nor "
                    "--draft, exports the bundled pair from models/.")
    folders = "".join(f", or {f.folders}" for f in FAMILIES if f.folders)
    p.add_argument("--target", help=f"target checkpoint: hub id (e.g. t5-large), local directory{folders}; alone, "
                                    "without --draft, the export has no draft model and decodes with the lookup")
    p.add_argument("--draft", action="append", metavar="[NAME=]CHECKPOINT",
                   help="draft checkpoint: hub id (e.g. t5-small), local directory or a folder --target takes. "
                        "The first is the default draft, named 'draft'; repeat with NAME=CHECKPOINT for more draft models, usable as chain "
                        "levels (e.g. --draft t5-small --draft mid=t5-base, then draft='draft,mid')")
    p.add_argument("--export", default="exported", type=Path, metavar="DIR",
                   help="the export directory to write (default: ./exported)")
    p.add_argument("--gamma-max", type=int, default=8, help="largest gamma the runtime may use (default 8)")
    p.add_argument("--max-length", type=int, default=None,
                   help="longest prompt and longest decoder sequence, in tokens (default: the models' own decoder "
                        "positions when they have learned ones (448 in OpenAI's checkpoints), else "
                        f"{DEFAULT_MAX_LENGTH}; a value past the models' positions is refused)")
    p.add_argument("--dtype", default="fp32", metavar="{fp32,fp16,int8}",
                   help="fp32 (default), fp16 (weights and KV cache) or int8 (int8 weights for the matrix "
                        "products, fp32 activations and KV cache; a target keeps its first decoder block, its LM "
                        "head and its first encoder block's self-attention value and output projections in fp32)")
    p.add_argument("--draft-dtype", default=None, metavar="{fp32,fp16,int8,int8-wo}",
                   help="the draft models' weights when they differ from --dtype: int8 (dynamic) or int8-wo "
                        "(weight-only int8, often the fastest draft step); an int8 draft keeps the output exactly "
                        "the target's (only the target's p decides)")
    p.add_argument("--datastore-text", nargs="+", metavar="FILE",
                   help="text in the output's language for the lookup to copy from, indexed into the export's "
                        "datastore.sdds: one segment a line (.txt, .txt.gz) or .jsonl records (with "
                        "--datastore-text-field). Default: none, or for the bundled pair its training targets "
                        "(models/datastore/); 'none': no datastore")
    p.add_argument("--datastore-text-field", metavar="NAME",
                   help="the field of .jsonl --datastore-text files holding the text")
    p.add_argument("--draft-vocab", type=int, metavar="K",
                   help="the draft models predict over the K tokens most frequent in --draft-vocab-text (or the "
                        "--datastore-text) and the special tokens only, a cheaper output projection at real "
                        "vocabulary sizes; the output stays exactly the target's (e.g. 8000)")
    p.add_argument("--draft-vocab-text", nargs="+", metavar="FILE",
                   help="the text --draft-vocab counts tokens in: one segment a line (.txt, .txt.gz) or .jsonl "
                        "records (with --datastore-text-field); default: the --datastore-text files")
    p.add_argument("--no-draft", action="store_true",
                   help="export --target alone: without --draft, a draft that specdec ships for a target is "
                        "attached when the target's weights are the ones it was distilled for (it says so)")
    p.add_argument("--accept-int8-drift", action="store_true",
                   help="keep an int8 target whose logits drift past the parity tolerance (its output is then the "
                        "int8 model's, exactly); an int8 draft is never refused: the target verifies its guesses")
    p.add_argument("--graph-capture", action="store_true",
                   help="also write the graphs CUDA can capture (fixed-size cache bound whole, no control flow), "
                        "loaded with graph_capture=True / --graph-capture; fp32 or fp16 T5 pairs")
    p.add_argument("--capture-attention", default="plain", choices=("plain", "fused"),
                   help="the capturable graphs' attention: plain MatMuls and Softmax (default), or fused: one "
                        "onnxruntime MultiHeadAttention node per attention (fewer kernels a step)")
    p.add_argument("--force", action="store_true", help="replace an existing export directory")
    p.add_argument("--opset", type=int, default=17, help=argparse.SUPPRESS)
    return p


def _main(argv) -> int:
    args = parser().parse_args(argv)
    if args.draft is not None and args.target is None:
        raise SpecdecError("--draft needs --target: a draft is a draft of a target",
                           "pass --target too, or neither for the bundled pair")
    target, draft = (args.target, None) if args.target else bundled_pair()
    store = args.datastore_text if args.datastore_text is not None else [] if args.target else bundled_datastore()
    if store == ["none"]:
        store = []
    more = {}
    if args.draft:
        if args.no_draft:
            raise SpecdecError("--no-draft and --draft contradict each other", "pass one of them")
        draft, more = _drafts(args.draft)
    elif args.target and not args.no_draft:
        draft = shipped_draft(args.target)
    warnings.filterwarnings("ignore")          # the ONNX tracer's warnings say nothing actionable to users
    reports = export_pair(ExportOptions(target, draft, args.export, args.gamma_max, args.max_length, args.dtype,
                                        args.force, args.opset, more, args.draft_dtype, store,
                                        args.datastore_text_field, graph_capture=args.graph_capture,
                                        capture_attention=args.capture_attention, draft_vocab=args.draft_vocab,
                                        draft_vocab_text=args.draft_vocab_text))
    failed = [role for role, rep in reports.items() if not rep["passed"]]
    int8 = {role for role in failed if int8_drift(reports[role])}
    for role in sorted(int8 - {"target"}):
        rep = reports[role]
        print(f"  note: the {rep['weights']} {role}'s logits drift past the fp32 tolerance (argmax agrees on "
              f"{rep['argmax_agree']}/{rep['argmax_positions']} positions): it cannot change the output, the target "
              "verifies every guess; it may only keep fewer of them")
    if "target" in int8 and not args.accept_int8_drift:
        rep = reports["target"]
        shutil.rmtree(args.export, ignore_errors=True)       # refused: nothing that loads stays behind
        print(f"error: the int8 target's logits drift from the float64 reference by "
              f"{max(rep['step_max_abs_diff'], rep['verify_max_abs_diff']):.2g} (tolerance {rep['tolerance']:.2g}; "
              f"argmax agrees on {rep['argmax_agree']}/{rep['argmax_positions']} positions), so {args.export} was "
              f"removed; export again with --accept-int8-drift to keep it (its output is then the int8 model's), or "
              f"export the target in fp32.", file=sys.stderr)
        return 1
    failed = [role for role in failed if role not in int8]
    if failed:
        shutil.rmtree(args.export, ignore_errors=True)
        print(f"error: parity check failed for {', '.join(failed)}: the graphs do not compute what PyTorch does, so "
              f"{args.export} was removed; the parity line above shows their error beside PyTorch's own.",
              file=sys.stderr)
        return 1
    extra = "".join(f" + {path} ({name})" for name, path in more.items())
    drafts = f" + {draft} (draft){extra}" if draft is not None else \
        " with no draft model (decoding uses the lookup: the prompt, the output so far and a datastore)"
    print(f"exported {target} (target){drafts} to {args.export}")
    return 0


def _drafts(values: list) -> tuple[str, dict]:
    """--draft values -> (the default draft's checkpoint, {name: checkpoint} of the others)."""
    named = []
    for i, value in enumerate(values):
        name, sep, path = value.partition("=")
        if not sep or "/" in name or "\\" in name:      # a plain checkpoint (a path may contain '=')
            if i > 0:
                raise SpecdecError(f"--draft {value!r} is a second draft without a name",
                                   "name every --draft after the first: --draft NAME=CHECKPOINT (e.g. mid=t5-base)")
            name, path = "draft", value
        if not path:
            raise SpecdecError(f"--draft {value!r} names no checkpoint", "use --draft NAME=CHECKPOINT")
        named.append((name, path))
    if named[0][0] != "draft":
        raise SpecdecError(f"the first --draft is the default draft and is named 'draft' (got {named[0][0]!r})",
                           "leave the first --draft unnamed, and name the others: --draft t5-small --draft mid=t5-base")
    names = [n for n, _ in named]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise SpecdecError(f"two --draft models are named {dup!r}", "give each --draft NAME=CHECKPOINT its own name")
    return named[0][1], dict(named[1:])


def main(argv=None) -> int:
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
