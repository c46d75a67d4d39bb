"""specdec-datastore: build, extend and describe a datastore the lookup searches.

    specdec-datastore build --export DIR --out store.sdds TEXT [TEXT ...] [--field NAME]
    specdec-datastore add store.sdds --export DIR TEXT [TEXT ...] [--field NAME]
    specdec-datastore info store.sdds [--export DIR]

TEXT: one segment a line (.txt, .txt.gz) or JSON lines (.jsonl, .jsonl.gz, with --field). A decoder uses it with
SpeculativeDecoder.load(DIR, datastore="store.sdds"), or `specdec-export --datastore-text TEXT ...` builds one into the
export directory.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..core.errors import OneLineParser, SpecdecError, run_cli
from ..loading.datastore import Datastore
from .datastore_build import build, load_tokenizer


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="specdec-datastore", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, metavar="{build,add,info}")
    b = sub.add_parser("build", help="index text files into a new datastore")
    b.add_argument("texts", nargs="+", metavar="TEXT",
                   help="text files to index: plain text, .jsonl (with --field), either gzipped or not")
    b.add_argument("--out", required=True, type=Path, help="the datastore file to write (e.g. store.sdds)")
    a = sub.add_parser("add", help="add text files to a datastore (rewrites it)")
    a.add_argument("store", type=Path, help="the datastore file to extend")
    a.add_argument("texts", nargs="+", metavar="TEXT", help="text files to add (as for build)")
    for q in (b, a):
        q.add_argument("--export", required=True, help="the export directory (or a tokenizer.json) whose tokenizer "
                                                       "makes the ids")
        q.add_argument("--field", help="the field of .jsonl files holding the text")
    b.add_argument("--force", action="store_true", help="replace an existing --out file")
    i = sub.add_parser("info", help="describe a datastore (and check it against an export)")
    i.add_argument("store", type=Path, help="the datastore file to describe")
    i.add_argument("--export", help="check that it was made with this export's tokenizer")
    i.add_argument("--json", action="store_true", help="print JSON")
    return p


def _main(argv) -> int:
    args = parser().parse_args(argv)
    if args.command == "info":
        expected = {}
        if args.export:
            _, size, sha = load_tokenizer(args.export)
            expected = {"tokenizer_size": size, "tokenizer_sha256": sha}
        store = Datastore.open(args.store, **expected)
        info = store.info()
        if args.json:
            print(json.dumps(info, indent=1))
        else:
            print(f"{info['path']}: {info['tokens']:,} tokens in {info['segments']:,} segments, "
                  f"{info['bytes'] / 2**20:.1f} MiB; ids of a tokenizer of {info['tokenizer_size']}, n-grams up to "
                  f"{info['width']}; tokenizer sha256 {info['tokenizer_sha256'][:16]}.."
                  + (" (matches the export)" if expected else ""))
        return 0
    if args.command == "build":           # the path first: tokenizing may take minutes
        if args.out.is_dir():
            raise SpecdecError(f"'{args.out}' is a folder", f"name the datastore file, e.g. --out "
                                                           f"{args.out / 'store.sdds'}")
        if args.out.exists() and not args.force:
            raise SpecdecError(f"'{args.out}' already exists", "pass --force to replace it, or use `add`")
        if not args.out.parent.is_dir():
            raise SpecdecError(f"the folder '{args.out.parent}' does not exist", "create it, or pick another --out")
        store = build(args.out, args.texts, args.export, args.field)
    else:
        old = Datastore.open(args.store)
        store = build(args.store, args.texts, args.export, args.field, add_to=old)
    print(f"wrote {store.path}: {store.tokens:,} tokens in {store.segments:,} segments, "
          f"{store.file_bytes / 2**20:.1f} MiB")
    return 0


def main(argv=None) -> int:
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
