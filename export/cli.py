"""`specdec-export`: two T5 checkpoints (hub ids or local directories) -> one export directory."""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from specdec.runtime.errors import SpecdecError, run_cli

from .pair import DTYPES, ExportOptions, bundled_pair, export_pair


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="specdec-export",
        description="Export a T5 target and draft to ONNX graphs with KV-cache I/O and a fused sampling head, the "
                    "tokenizer and a manifest. With neither --target nor --draft, exports the bundled pair "
                    "from models/.")
    p.add_argument("--target", help="target checkpoint: hub id (e.g. t5-large) or local directory")
    p.add_argument("--draft", help="draft checkpoint: hub id (e.g. t5-small) or local directory")
    p.add_argument("--out", default="exported", type=Path, help="export directory (default: ./exported)")
    p.add_argument("--gamma-max", type=int, default=8, help="largest gamma the runtime may use (default 8)")
    p.add_argument("--max-length", type=int, default=256,
                   help="longest prompt and longest decoder sequence, in tokens (default 256)")
    p.add_argument("--dtype", choices=DTYPES, default="fp32", help="weights and KV cache precision (default fp32)")
    p.add_argument("--force", action="store_true", help="replace an existing export directory")
    p.add_argument("--opset", type=int, default=17, help=argparse.SUPPRESS)
    return p


def _main(argv) -> int:
    args = parser().parse_args(argv)
    if (args.target is None) != (args.draft is None):
        raise SpecdecError("--target and --draft go together", "pass both, or neither for the bundled pair")
    target, draft = (args.target, args.draft) if args.target else bundled_pair()
    warnings.filterwarnings("ignore")          # the ONNX tracer's warnings say nothing actionable to users
    reports = export_pair(ExportOptions(target, draft, args.out, args.gamma_max, args.max_length, args.dtype,
                                        args.force, args.opset))
    failed = [role for role, rep in reports.items() if not rep["passed"]]
    if failed:
        print(f"error: parity check failed for {', '.join(failed)}; the export in {args.out} is not trustworthy",
              file=sys.stderr)
        return 1
    print(f"exported {target} (target) + {draft} (draft) to {args.out}")
    return 0


def main(argv=None) -> int:
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
