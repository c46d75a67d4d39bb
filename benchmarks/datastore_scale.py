"""How a datastore's host cost and memory grow with its size: a synthetic datastore of N tokens is built in one
process, then opened and its lookups timed in a fresh one, so that its memory is its own.

    specdec-bench datastore-scale --tokens 1000000,100000000 [--vocab 32128] [--lookups 20000]

(`python -m specdec.bench.datastore_scale` takes the same flags.)

The text: segments of 5..45 ids drawn from a Zipf law (s = 1.1) over a T5-sized vocabulary, so that a few ids are very
frequent, as "the" and "," are. A lookup asks for 8 tokens after 3 ids cut from the stream (it matches) or drawn at
random (it mostly falls back to shorter n-grams). Opening includes the checks (one read of the whole file); resident
memory is anonymous / file-backed (mapped pages that were read count as file-backed).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time


def rss() -> dict:
    with open("/proc/self/status") as fh:
        fields = dict(line.split(":", 1) for line in fh)
    return {key: int(fields[key].split()[0]) / 1024 for key in ("RssAnon", "RssFile")}       # MiB


def build(tokens: int, vocab: int, lookups: int, folder: str) -> dict:
    import numpy as np

    from specdec.runtime.tools.datastore_build import write

    rng = np.random.default_rng(0)
    ids = (rng.zipf(1.1, tokens) - 1) % vocab
    ends = np.cumsum(rng.integers(5, 46, tokens // 5))
    ends = ends[ends < tokens]
    segments = np.split(ids[:ends[-1]], ends[:-1])
    began = time.perf_counter()
    write(os.path.join(folder, f"scale-{tokens}.sdds"), segments, vocab, "00" * 32)
    built = time.perf_counter() - began
    contexts = []
    for i in range(lookups):
        at = int(rng.integers(3, len(ids)))
        contexts.append([int(t) for t in (ids[at - 3:at] if i % 2 else rng.integers(0, vocab, 3))])
    with open(os.path.join(folder, f"contexts-{tokens}.json"), "w") as fh:
        json.dump(contexts, fh)
    return {"build_s": built, "build_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def probe(tokens: int, vocab: int, folder: str) -> dict:
    import numpy as np

    from specdec.runtime.loading.datastore import Datastore

    with open(os.path.join(folder, f"contexts-{tokens}.json")) as fh:
        contexts = json.load(fh)
    before = rss()
    began = time.perf_counter()
    store = Datastore.open(os.path.join(folder, f"scale-{tokens}.sdds"), vocab)
    opened = time.perf_counter() - began
    after_open = rss()
    times, hits = [], 0
    for context in contexts:
        began = time.perf_counter()
        n, found = store.continuations(context, 8)
        times.append(time.perf_counter() - began)
        hits += n > 0
    times = np.array(times) * 1e6
    return {"tokens": store.tokens, "segments": store.segments, "file_mib": store.file_bytes / 2 ** 20,
            "open_s": opened, "rss_before_open_mib": before, "rss_after_open_mib": after_open,
            "rss_after_lookups_mib": rss(), "lookups": len(contexts), "matched": hits / len(contexts),
            "lookup_us_median": float(np.median(times)), "lookup_us_p99": float(np.percentile(times, 99))}


def _stage(stage: str, tokens: int, args, folder: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "specdec.bench.datastore_scale", "--stage", stage,
                           "--tokens", str(tokens), "--vocab", str(args.vocab), "--lookups", str(args.lookups),
                           "--dir", folder], capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"error: the {tokens}-token {stage} failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def add_arguments(p) -> None:
    p.add_argument("--tokens", default="1000000,100000000", help="sizes, comma-separated")
    p.add_argument("--vocab", type=int, default=32128, help="the random tokens' vocabulary size (default 32128)")
    p.add_argument("--lookups", type=int, default=20000, help="timed lookups per size (default 20000)")
    p.add_argument("--dir", help="where the datastores are written (default: a temporary directory, removed)")
    p.add_argument("--json", metavar="OUT.json", help="also write the figures as JSON")
    p.add_argument("--stage", choices=("build", "probe"), help=argparse.SUPPRESS)


def run(args) -> int:
    if args.stage:
        tokens = int(float(args.tokens))
        row = build(tokens, args.vocab, args.lookups, args.dir) if args.stage == "build" else \
            probe(tokens, args.vocab, args.dir)
        print(json.dumps(row))
        return 0
    rows = []
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        for tokens in (int(float(t)) for t in args.tokens.split(",")):
            rows.append({**_stage("build", tokens, args, folder), **_stage("probe", tokens, args, folder)})
            for name in (f"scale-{tokens}.sdds", f"contexts-{tokens}.json"):
                os.unlink(os.path.join(folder, name))
    from .common.options import show
    from .common.tables import Table

    mib = "{0[RssAnon]:.0f} / {0[RssFile]:.0f} MiB".format
    show([Table("", ("tokens", "file", "build", "build peak RSS", "open (checks)", "RSS before open, anon / file",
                     "after open", "after lookups", "lookup median", "p99", "matched"),
                [[f"{r['tokens']:,}", f"{r['file_mib']:.0f} MiB", f"{r['build_s']:.1f} s",
                  f"{r['build_peak_rss_mib']:.0f} MiB", f"{r['open_s']:.2f} s", mib(r["rss_before_open_mib"]),
                  mib(r["rss_after_open_mib"]), mib(r["rss_after_lookups_mib"]), f"{r['lookup_us_median']:.0f} us",
                  f"{r['lookup_us_p99']:.0f} us", f"{r['matched']:.0%}"] for r in rows])], args.json, rows)
    return 0


def main(argv=None) -> int:
    """Also how run() starts each stage in a fresh process."""
    from .common.options import tool_main

    return tool_main("python -m specdec.bench.datastore_scale", __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
