"""Stage `data`: fetch Debian's English and German package descriptions and build the two tasks.

The descriptions come through apt itself (no Hugging Face hub):

    apt-get update -o Acquire::Languages=en -o Dir::State::Lists=<work>/apt/en/lists ...
    apt-get update -o Acquire::Languages=de -o Dir::State::Lists=<work>/apt/de/lists ...

Each update goes into its own private lists directory (a second update into the same
directory would clean the first one's Translation files), with a private cache directory,
so the machine's own apt state is never touched.  Entries join on ``Description-md5``;
binary packages are mapped to their *source* package through the ``Packages`` indices
fetched by the same update, and the train/validation/test split is a hash of the source
package name, so no source package (and therefore no shared description) is in two splits.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import subprocess
from collections import defaultdict

SPLIT_SALT = "specdec-debian-descriptions-v1"
SUMMARIZE_PREFIX = "summarize: "
TRANSLATE_PREFIX = "translate English to German: "
# token lengths the models are trained and evaluated at, per task
MAX_SRC = {"summarize": 64, "translate": 64}
MAX_TGT = {"summarize": 32, "translate": 48}


# --------------------------------------------------------------------------- fetching
def fetch_lists(work_dir: str, refresh: bool = False) -> dict:
    """Run the two private apt-get updates; return {'en': lists_dir, 'de': lists_dir}."""
    out = {}
    for lang in ("en", "de"):
        lists = os.path.join(work_dir, "apt", lang, "lists")
        cache = os.path.join(work_dir, "apt", lang, "cache")
        have = glob.glob(os.path.join(lists, f"*_main_i18n_Translation-{lang}*"))
        if have and not refresh:
            out[lang] = lists
            continue
        os.makedirs(os.path.join(lists, "partial"), exist_ok=True)
        os.makedirs(os.path.join(cache, "archives", "partial"), exist_ok=True)
        cmd = [
            "apt-get", "update",
            "-o", f"Acquire::Languages={lang}",
            "-o", f"Dir::State::Lists={lists}",
            "-o", f"Dir::Cache={cache}",
            "-o", "APT::Update::Post-Invoke-Success=",
            "-o", "APT::Update::Post-Invoke=",
        ]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        out[lang] = lists
    return out


def _read_lz4_or_plain(path: str) -> str:
    if path.endswith(".lz4"):
        import lz4.frame

        with open(path, "rb") as f:
            return lz4.frame.decompress(f.read()).decode("utf-8", errors="replace")
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def _stanzas(text: str):
    for block in text.split("\n\n"):
        fields, key = {}, None
        for line in block.split("\n"):
            if not line:
                continue
            if line[0] in " \t" and key is not None:
                fields[key] += "\n" + line
            else:
                k, _, v = line.partition(":")
                key = k.strip()
                fields[key] = v.strip()
        if fields:
            yield fields


def parse_translations(lists_dir: str, lang: str) -> dict:
    """md5 -> {'packages': [...], 'synopsis': str, 'paragraphs': [str]}."""
    out: dict[str, dict] = {}
    files = sorted(glob.glob(os.path.join(lists_dir, f"*_main_i18n_Translation-{lang}*")))
    files = [f for f in files if not f.endswith(".diff")]
    for path in files:
        for st in _stanzas(_read_lz4_or_plain(path)):
            md5 = st.get("Description-md5")
            desc = st.get(f"Description-{lang}")
            if not md5 or desc is None:
                continue
            first, _, rest = desc.partition("\n")
            paragraphs, cur = [], []
            for line in rest.split("\n"):
                s = line[1:] if line.startswith(" ") else line
                if s.strip() == ".":
                    if cur:
                        paragraphs.append(cur)
                    cur = []
                elif s.strip():
                    cur.append(s)
            if cur:
                paragraphs.append(cur)
            entry = out.setdefault(md5, {"packages": [], "synopsis": first.strip(), "paragraphs": []})
            entry["packages"].append(st.get("Package", ""))
            if not entry["paragraphs"]:
                entry["paragraphs"] = [_join_paragraph(p) for p in paragraphs]
    return out


def _join_paragraph(lines: list[str]) -> str:
    # Lines starting with a bullet keep their bullet, everything is flattened to one line.
    return re.sub(r"\s+", " ", " ".join(l.strip() for l in lines)).strip()


def parse_sources(lists_dir: str) -> dict:
    """binary package -> source package, from the Packages indices of the update."""
    src = {}
    for path in sorted(glob.glob(os.path.join(lists_dir, "*_Packages*"))):
        if path.endswith(".diff"):
            continue
        for st in _stanzas(_read_lz4_or_plain(path)):
            p = st.get("Package")
            if not p:
                continue
            s = st.get("Source", p).split(" ")[0].strip() or p
            src.setdefault(p, s)
    return src


# --------------------------------------------------------------------------- tasks
_SENT_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9ÄÖÜ])")
_ABBREV_END = re.compile(r"(\b(e\.g|i\.e|etc|vs|z\.B|d\.h|u\.a|bzw|ca|Nr|inkl|usw|evtl|ggf|Dr|Mr|Inc|Ltd)\.|\b[A-Za-z]\.)$")


def split_sentences(text: str) -> list[str]:
    parts = _SENT_SPLIT.split(text)
    out: list[str] = []
    for p in parts:
        if out and _ABBREV_END.search(out[-1]):
            out[-1] = out[-1] + " " + p
        else:
            out.append(p)
    return [p.strip() for p in out if p.strip()]


def split_of(source_package: str) -> str:
    h = int(hashlib.md5((SPLIT_SALT + source_package).encode()).hexdigest()[:8], 16) % 100
    if h < 90:
        return "train"
    if h < 95:
        return "validation"
    return "test"


def _words(s: str) -> int:
    return len(s.split())


def build_examples(en: dict, de: dict, sources: dict) -> dict:
    splits: dict[str, list] = {"train": [], "validation": [], "test": []}
    seen_pairs = set()
    for md5 in sorted(en):
        e = en[md5]
        pkgs = sorted(set(e["packages"]))
        srcpkg = sorted(sources.get(p, p) for p in pkgs)[0]
        split = split_of(srcpkg)
        bucket = splits[split]

        def add(task, src, ref):
            key = (task, src, ref)
            if key in seen_pairs:
                return
            seen_pairs.add(key)
            prefix = SUMMARIZE_PREFIX if task == "summarize" else TRANSLATE_PREFIX
            bucket.append({"task": task, "source": prefix + src, "reference": ref, "package": srcpkg})

        long_text = " ".join(e["paragraphs"])
        if 8 <= _words(long_text) and 1 <= _words(e["synopsis"]):
            add("summarize", long_text, e["synopsis"])

        d = de.get(md5)
        if d is None:
            continue
        if e["synopsis"] and d["synopsis"]:
            add("translate", e["synopsis"], d["synopsis"])
        if len(e["paragraphs"]) == len(d["paragraphs"]):
            for pe, pd in zip(e["paragraphs"], d["paragraphs"]):
                se, sd = split_sentences(pe), split_sentences(pd)
                if len(se) == len(sd):
                    for a, b in zip(se, sd):
                        if 2 <= _words(a) <= 40 and 1 <= _words(b) <= 45:
                            add("translate", a, b)
                elif _words(pe) <= 40 and _words(pd) <= 45:
                    add("translate", pe, pd)
    return splits


def run_data(work_dir: str, refresh: bool = False) -> dict:
    lists = fetch_lists(work_dir, refresh=refresh)
    print("parsing Translation-en / Translation-de / Packages ...", flush=True)
    en = parse_translations(lists["en"], "en")
    de = parse_translations(lists["de"], "de")
    sources = parse_sources(lists["en"])
    splits = build_examples(en, de, sources)
    data_dir = os.path.join(work_dir, "data")
    os.makedirs(data_dir, exist_ok=True)
    stats = {"english_descriptions": len(en), "german_descriptions": len(de),
             "joined_on_md5": sum(1 for m in en if m in de)}
    for name, rows in splits.items():
        write_jsonl(os.path.join(data_dir, f"{name}.jsonl"), rows)
        counts = defaultdict(int)
        for r in rows:
            counts[r["task"]] += 1
        stats[name] = dict(counts)
        stats[name + "_source_packages"] = len({r["package"] for r in rows})
    with open(os.path.join(data_dir, "stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
    print(json.dumps(stats, indent=1), flush=True)
    return stats


def load_jsonl(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(l) for l in f if l.strip()]


def write_jsonl(path: str, rows) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def encode_rows(tok, rows, drop_long: bool = True):
    """-> list of (src_ids, tgt_ids) ready for training; src ends in </s>, tgt ends in </s>."""
    src = tok([r["source"] for r in rows], add_special_tokens=True).input_ids
    tgt = tok([r["reference"] for r in rows], add_special_tokens=True).input_ids
    out = []
    for r, s, t in zip(rows, src, tgt):
        ms, mt = MAX_SRC[r["task"]], MAX_TGT[r["task"]]
        if len(s) > ms:
            if r["task"] == "translate" and drop_long:
                continue
            s = s[: ms - 1] + [1]
        if len(t) > mt:
            if drop_long:
                continue
            t = t[: mt - 1] + [1]
        out.append((s, t))
    return out
