"""`specdec-bench whisper`: Whisper exports against faster-whisper and transformers on the same weights and clips.

    specdec-bench whisper --export DIR [--export NAME=DIR ...] --prompts CLIPS.jsonl --weights FOLDER
                          [--peers faster-whisper,faster-whisper-int8,transformers] [--draft none auto]
                          [--repeat 3] [--threads 2] [--long RECORDING.wav] [--json OUT] [--markdown OUT]

--weights is the checkpoint the exports were made from: a CTranslate2 / faster-whisper folder (faster-whisper reads it
as it is; transformers reads the lossless conversion specdec-export makes of it) or a transformers folder (converted for
faster-whisper with CTranslate2's own converter into a temporary folder). Every engine decodes greedy, one clip at a
time, with --threads threads: each specdec export at each --draft configuration (none: the target alone; auto: the
default), faster-whisper at compute_type float32 and int8 (beam 1, temperature 0 only, no VAD, no timestamps: as
greedy as it runs), and transformers' greedy generate (its eager PyTorch model).

One untimed pass over the clips warms every engine up (and lets auto learn), then --repeat rounds; in each round
every clip goes through every engine, the engines' order turning from clip to clip, so a slower or busier moment of
the machine falls on all of them alike. Per engine: ms per clip (the rounds' median of the mean over the clips),
the encoder's share of it, the ratio to faster-whisper fp32's and int8's ms per clip in the same run, the word
error rate against the clips' "reference" texts (lower case, punctuation dropped), and how many clips give exactly
transformers' greedy tokens (text tokens: the ids below <|endoftext|>). faster-whisper pads the log-mel rather than
the waveform, so its tokens can differ from transformers' on short clips: it is the
speed to beat, transformers the output to equal. For specdec's speculative configurations: the guesses kept per
guess proposed, alpha (kept over kept plus rejections: the per-guess acceptance), tokens per target run, the draft
model's step cost over the target's (c) and "decode x": the decoding phase's speed (ms per token after the encoder)
over the same export's target alone.

--long RECORDING.wav (longer than 30 s; a reference from a .txt beside it): once per round, each specdec export with
timestamps (window by window), faster-whisper's sequential long form and its batched pipeline, transformers' long
form. The encoder line compares the encoder's time over one 30-s window with a compute bound: its multiply-adds at
1,500 positions over this machine's measured float32 matrix-product rate on --threads threads.
"""

from __future__ import annotations

import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from specdec.runtime.core.errors import SpecdecError

from .common.tables import Table, fmt, render

PEERS = ("faster-whisper", "faster-whisper-int8", "transformers")
SUMMARY = "Whisper exports against faster-whisper (fp32, int8) and transformers on the same weights and clips"


def add_arguments(p) -> None:
    p.add_argument("--export", dest="exports", action="append", required=True, metavar="[NAME=]DIR",
                   help="a Whisper export directory; repeat for more (e.g. --export fp32=exported-base "
                        "--export int8=exported-base-int8); NAME defaults to the export's weights (fp32, int8)")
    p.add_argument("--weights", required=True, metavar="FOLDER",
                   help="the checkpoint the exports were made from: a CTranslate2 / faster-whisper folder or a "
                        "transformers folder (the peers run these weights)")
    p.add_argument("--prompts", required=True, metavar="FILE",
                   help='a JSONL file of clips: {"audio": "clip.wav", "reference": "...", "language": "en"} lines '
                        "(16 kHz WAV files, paths relative to the file)")
    p.add_argument("--num-prompts", type=int, default=None, help="take the first N clips (default: all)")
    p.add_argument("--draft", nargs="+", default=["none", "auto"], metavar="NAME[:G]",
                   help="specdec's configurations per export (default: none auto)")
    p.add_argument("--peers", default=",".join(PEERS),
                   help=f"comma-separated, from {', '.join(PEERS)}; 'none' for none (default: all)")
    p.add_argument("--long", metavar="RECORDING.wav",
                   help="also a recording longer than 30 s, with timestamps (a .txt of the same name: its reference)")
    p.add_argument("--batch-size", type=int, default=8, help="faster-whisper's batched pipeline on --long (default 8)")
    p.add_argument("--repeat", type=int, default=3, help="timed rounds over the clips (default 3)")
    p.add_argument("--max-new-tokens", type=int, default=224, help="tokens per clip at most (default 224, as "
                   "faster-whisper's cap per window)")
    p.add_argument("--threads", type=int, default=2, help="threads of every engine (default 2)")
    p.add_argument("--json", metavar="OUT.json", help="also write the figures as JSON")
    p.add_argument("--markdown", metavar="OUT.md", help="also write the tables as Markdown")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


# -- words ----------------------------------------------------------------------------------------------------------

def words(text: str) -> list[str]:
    """Lower case, punctuation dropped (apostrophes inside words kept), split on white space."""
    text = re.sub(r"[^\w\s']", " ", text.lower()).replace(" '", " ").replace("' ", " ")
    return text.split()


def word_errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """(substitutions + deletions + insertions, reference words) by edit distance over words."""
    from specdec.models.evaluate import edit_distance

    ref = words(reference)
    return edit_distance(ref, words(hypothesis)), len(ref)


# -- engines --------------------------------------------------------------------------------------------------------

class Engine:
    """One way to transcribe a clip: `run(audio, language)` -> (text tokens, text, ms, extra figures)."""

    def __init__(self, label: str, run, kind: str):
        self.label, self.run, self.kind = label, run, kind


def _specdec_engines(exports: list, configs: list, threads: int, max_new: int) -> tuple[list, dict]:
    from specdec.runtime import SpeculativeDecoder

    from .common.whisper_peers import text_tokens

    engines, decoders = [], {}
    for text in exports:
        name, sep, path = text.partition("=")
        if not sep:
            name, path = "", text
        dec = SpeculativeDecoder.load(path, provider="cpu", threads=threads)
        if dec.manifest.speech is None:
            raise SpecdecError(f"{path} is not a Whisper export", "pass Whisper exports to specdec-bench whisper")
        name = name or dec.manifest.models["target"].weights
        if name in decoders:
            raise SpecdecError(f"two exports are named {name!r}", "name them: --export fp32=DIR --export int8=DIR")
        decoders[name] = dec
        eot = dec.eos_id
        for config in configs:
            draft, _, gamma = config.partition(":")
            params = {"draft": draft, "gamma": int(gamma) if gamma else "auto"}

            def run(audio, language, dec=dec, params=params, eot=eot):
                language = language if dec.manifest.speech["languages"] else None     # an .en model takes none
                started = time.perf_counter()
                result = dec.generate(audio=audio, language=language, max_new_tokens=max_new, **params)
                ms = 1000 * (time.perf_counter() - started)
                s = result.stats
                return (text_tokens(result.token_ids, eot), result.text, ms,
                        {"encoder_ms": 1000 * s.encoder_s, "accepted": s.accepted, "proposed": s.proposed,
                         "rejections": sum(v.rejections for k, v in s.sources.items() if k != "none"),
                         "decode_ms": ms - 1000 * s.encoder_s,
                         "tokens": s.new_tokens, "target_calls": s.target_calls, "draft_calls": s.draft_calls,
                         "draft_s": s.draft_s, "target_s": s.target_s})
            engines.append(Engine(f"specdec {name} {config}", run, "specdec"))
    return engines, decoders


def _ct2_folder(weights: Path, work: Path) -> Path:
    """A CTranslate2 folder of the weights: `weights` itself, or a float32 conversion of a transformers folder."""
    from specdec.export.families.ctranslate2_whisper import is_ct2_folder

    if is_ct2_folder(weights):
        return weights
    import ctranslate2

    out = work / "ct2"
    files = [n for n in ("tokenizer.json", "preprocessor_config.json") if (weights / n).is_file()]
    ctranslate2.converters.TransformersConverter(str(weights), copy_files=files).convert(
        str(out), quantization="float32", force=True)
    return out


def _transformers_folder(weights: Path) -> Path:
    from specdec.export.families import checkpoint_path

    return Path(checkpoint_path(str(weights), log=lambda m: print(m, file=sys.stderr)))


def _peer_engines(names: list, weights: Path, work: Path, threads: int, max_new: int) -> tuple[list, dict]:
    from .common.whisper_peers import FasterWhisperPeer, TransformersPeer

    engines, peers = [], {}
    for name in names:
        if name.startswith("faster-whisper"):
            compute = "int8" if name.endswith("int8") else "float32"
            peer = FasterWhisperPeer(_ct2_folder(weights, work), compute, threads)
        else:
            peer = TransformersPeer(_transformers_folder(weights), threads, max_new_tokens=max_new)
        peers[name] = peer

        def run(audio, language, peer=peer):
            got = peer.transcribe(audio, language)
            return got.token_ids, got.text, got.ms, {"encoder_ms": got.encoder_ms}
        engines.append(Engine(name, run, "peer"))
    return engines, peers


# -- the run --------------------------------------------------------------------------------------------------------

def _clips(args) -> list:
    from .common.prompts import read_prompts

    clips = read_prompts(args.prompts)
    if not clips or not all(c.is_audio for c in clips):
        raise SpecdecError(f"{args.prompts} holds no audio clips", 'write {"audio": "clip.wav"} lines')
    return clips[:args.num_prompts] if args.num_prompts else clips


def _peer_names(text: str) -> list:
    names = [n.strip() for n in text.split(",") if n.strip() and n.strip() != "none"]
    bad = [n for n in names if n not in PEERS]
    if bad:
        raise SpecdecError(f"unknown peer {bad[0]!r}", f"use a comma-separated list of {', '.join(PEERS)}, or none")
    return names


def run(args) -> int:
    import tempfile

    from .common import running
    from .common.machine import describe

    if args.repeat < 1:
        raise SpecdecError(f"--repeat must be at least 1 (got {args.repeat})", "use e.g. --repeat 3")
    peers = _peer_names(args.peers)
    clips = _clips(args)
    weights = Path(args.weights)
    if not weights.is_dir():
        raise SpecdecError(f"--weights {weights} is not a folder", "pass the checkpoint folder the exports came from")
    mach = running.begin("specdec-bench whisper", "cpu", args.threads)
    with tempfile.TemporaryDirectory(prefix="specdec-bench-whisper-") as scratch:
        engines, decoders = _specdec_engines(args.exports, args.draft, args.threads, args.max_new_tokens)
        more, peer_objects = _peer_engines(peers, weights, Path(scratch), args.threads, args.max_new_tokens)
        engines += more
        started = time.perf_counter()
        total = len(engines) * len(clips) * (1 + args.repeat)
        with running.progress(args, total, "specdec-bench whisper") as bar:
            records = _rounds(engines, clips, args.repeat, bar)
        engines_summary = _summary(engines, clips, records)
        bound = _encoder_bound(decoders, records, engines, args.threads)
        if args.long:
            print("\n" + render(sections({"settings": _settings(args, clips, weights, peers),
                                           "engines": engines_summary, "encoder_bound": bound})), flush=True)
        long = _long(args, decoders, peer_objects) if args.long else None
    out = {"mode": "whisper", "machine": mach, "command": getattr(args, "command_line", None),
           "settings": _settings(args, clips, weights, peers),
           "engines": engines_summary, "encoder_bound": bound,
           "long": long, "elapsed_s": time.perf_counter() - started}
    out["machine"].update({k: v for k, v in describe("cpu", args.threads).items() if k not in out["machine"]})
    running.report(out, args, sections)
    return 0


def _settings(args, clips: list, weights: Path, peers: list) -> dict:
    return {"exports": args.exports, "weights": str(weights), "prompts": str(args.prompts), "clips": len(clips),
            "audio_seconds": sum(c.audio.size for c in clips) / 16_000, "repeat": args.repeat,
            "threads": args.threads, "drafts": args.draft, "peers": peers, "max_new_tokens": args.max_new_tokens}


def _rounds(engines: list, clips: list, repeat: int, bar) -> dict:
    """label -> {"ms": [round][clip], "tokens": [clip], "text": [clip], "extra": [round][clip]}: one untimed
    pass, then `repeat` rounds, the engines' order turning from clip to clip."""
    records = {e.label: {"ms": [], "extra": [], "tokens": [None] * len(clips), "text": [None] * len(clips)}
               for e in engines}
    for rnd in range(repeat + 1):
        for r in records.values():
            r["ms"].append([0.0] * len(clips))
            r["extra"].append([None] * len(clips))
        for i, clip in enumerate(clips):
            turn = (rnd * len(clips) + i) % len(engines)
            for engine in engines[turn:] + engines[:turn]:
                tokens, text, ms, extra = engine.run(clip.audio, clip.language or "en")
                rec = records[engine.label]
                if rnd == 0:
                    rec["tokens"][i], rec["text"][i] = tokens, text
                elif tokens != rec["tokens"][i]:
                    raise SpecdecError(f"{engine.label} gave other tokens for clip {i + 1} in round {rnd} than in the "
                                       "warm-up", "greedy decoding must repeat itself: report this")
                rec["ms"][rnd][i], rec["extra"][rnd][i] = ms, extra
                bar.update(1)
    for r in records.values():          # the warm-up is not timed
        del r["ms"][0], r["extra"][0]
    return records


def _summary(engines: list, clips: list, records: dict) -> list:
    refs = [c.reference for c in clips]
    base = {name: statistics.median(statistics.fmean(r) for r in records[name]["ms"])
            for name in ("faster-whisper", "faster-whisper-int8") if name in records}
    truth = records.get("transformers", {}).get("tokens")
    rows = []
    for e in engines:
        rec = records[e.label]
        per_clip = statistics.median(statistics.fmean(r) for r in rec["ms"])
        extras = [x for r in rec["extra"] for x in r]
        encoder = [x["encoder_ms"] for x in extras if x.get("encoder_ms") is not None]
        total_ms = sum(sum(r) for r in rec["ms"])
        row = {"engine": e.label, "ms_per_clip": per_clip,
               "ms_per_clip_rounds": [statistics.fmean(r) for r in rec["ms"]],
               "encoder_share": sum(encoder) / total_ms if len(encoder) == len(extras) and total_ms else None,
               **{f"x_{name}": per_clip / ms for name, ms in base.items()},
               "identical_to_transformers": None if truth is None else
               sum(a == b for a, b in zip(rec["tokens"], truth)),
               "clips": len(clips), "texts": rec["text"]}
        if all(refs):
            errors = [word_errors(ref, hyp) for ref, hyp in zip(refs, rec["text"])]
            row["wer"] = sum(e for e, _ in errors) / max(1, sum(n for _, n in errors))
        if e.kind == "specdec":
            s = {k: sum(x[k] for x in extras) for k in ("accepted", "proposed", "rejections", "tokens",
                                                         "target_calls", "draft_calls", "draft_s", "target_s",
                                                         "decode_ms")}
            row["kept_per_guess"] = s["accepted"] / s["proposed"] if s["proposed"] else None
            row["alpha"] = s["accepted"] / (s["accepted"] + s["rejections"]) \
                if s["accepted"] + s["rejections"] else None
            row["decode_ms_per_token"] = s["decode_ms"] / s["tokens"] if s["tokens"] else None
            row["tokens_per_target_run"] = s["tokens"] / s["target_calls"] if s["target_calls"] else None
            row["c"] = (s["draft_s"] / s["draft_calls"]) / (s["target_s"] / s["target_calls"]) \
                if s["draft_calls"] and s["target_calls"] else None
        rows.append(row)
    for row in rows:                    # against the same export's target alone
        export = row["engine"].rsplit(" ", 1)[0]
        alone = next((r for r in rows if r["engine"] == f"{export} none"), None)
        if row["engine"].startswith("specdec") and alone is not None:
            row["x_target_alone"] = row["ms_per_clip"] / alone["ms_per_clip"]
            if row.get("decode_ms_per_token") and alone.get("decode_ms_per_token"):
                row["decode_speedup"] = alone["decode_ms_per_token"] / row["decode_ms_per_token"]
            row["identical_to_target_alone"] = sum(a == b for a, b in zip(records[row["engine"]]["tokens"],
                                                                          records[alone["engine"]]["tokens"]))
    return rows


def encoder_gflops(arch: dict, frames: int = 1500) -> float:
    """Multiply-adds x 2 of a Whisper encoder over `frames` positions, with the cross K/V projections of its decoder
    layers (the encoder graph computes those too): the two convolutions, per layer the attention projections, the
    score and value products and the feed-forward; norms, softmax and GELU left out."""
    d, layers, dec = arch["d_model"], arch["layers"], arch["decoder_layers"]
    ff = arch.get("encoder_ffn_dim") or arch["d_ff"]
    mels = arch["num_mel_bins"]
    conv = 2 * frames * mels * d * 3 + frames * d * d * 3
    layer = 4 * frames * d * d + 2 * frames * frames * d + 2 * frames * d * ff
    cross = dec * 2 * frames * d * d
    return 2 * (conv + layers * layer + cross) / 1e9


def matmul_gflops(threads: int, n: int = 1536, repeat: int = 5) -> float:
    """This machine's float32 matrix-product rate (GFLOP/s, the best of `repeat`): an n x n x n product in ONNX
    Runtime on `threads` threads, the bound a graph of large products can reach here."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "mm",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [n, n]),
                               helper.make_tensor_value_info("b", TensorProto.FLOAT, [n, n])],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, [n, n])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        session.run(None, {"a": a, "b": a})
        best = min(best, time.perf_counter() - started)
    return 2 * n ** 3 / best / 1e9


def _encoder_bound(decoders: dict, records: dict, engines: list, threads: int) -> dict:
    """Each export's encoder ms per clip (every clip is one 30-s window) against its GFLOPs over the measured
    matrix-product rate."""
    rate = matmul_gflops(threads)
    out = {"matmul_gflops_per_s": rate, "threads": threads, "exports": {}}
    for name, dec in decoders.items():
        arch = dec.manifest.models["target"].arch
        gflops = encoder_gflops(arch)
        runs = [x["encoder_ms"] for e in engines if e.label.startswith(f"specdec {name} ")
                for r in records[e.label]["extra"] for x in r]
        ms = statistics.median(runs)
        out["exports"][name] = {"gflops": gflops, "encoder_ms": ms, "bound_ms": 1000 * gflops / rate,
                                "achieved_gflops_per_s": gflops / ms * 1000}
    return out


def _long_specdec(dec, audio, max_new: int):
    """A function running the recording through `dec` with timestamps: (text, ms, segments)."""
    def go():
        started = time.perf_counter()
        language = "en" if dec.manifest.speech["languages"] else None
        r = dec.generate(audio=audio, language=language, timestamps=True, max_new_tokens=max_new)
        return r.text, 1000 * (time.perf_counter() - started), len(r.segments)
    return go


def _long_peer(peer, audio, batched: bool, batch_size: int):
    """A function running the recording through a peer's long form (faster-whisper's batched pipeline with
    `batched`): (text, ms, segments)."""
    def go():
        got = peer.transcribe_long(audio, "en", **({"batched": True, "batch_size": batch_size} if batched else {}))
        return got.text, got.ms, got.segments
    return go


def _long(args, decoders: dict, peers: dict) -> dict:
    """The long recording, once per round through each export (timestamps) and each peer's long form."""
    from specdec.runtime.loading.audio import check_audio

    path = Path(args.long)
    audio = check_audio(path)
    if audio.size <= 30 * 16_000:
        raise SpecdecError(f"--long {path} is {audio.size / 16_000:.1f} s, not longer than 30 s",
                           "pass a recording longer than one window")
    ref_file = path.with_suffix(".txt")
    reference = ref_file.read_text().strip() if ref_file.is_file() else None
    runs = {}
    for name, dec in decoders.items():
        runs[f"specdec {name} auto"] = _long_specdec(dec, audio, args.max_new_tokens)
    for name, peer in peers.items():
        runs[name] = _long_peer(peer, audio, False, args.batch_size)
        if name.startswith("faster-whisper"):
            runs[f"{name} batched"] = _long_peer(peer, audio, True, args.batch_size)
    ms = {label: [] for label in runs}
    texts = {}
    for rnd in range(args.repeat + 1):
        for label, go in runs.items():
            text, took, segments = go()
            texts[label] = (text, segments)
            if rnd:
                ms[label].append(took)
    rows = []
    for label in runs:
        row = {"engine": label, "ms": statistics.median(ms[label]), "segments": texts[label][1],
               "text": texts[label][0]}
        if reference:
            errors, count = word_errors(reference, texts[label][0])
            row["wer"] = errors / max(1, count)
        rows.append(row)
    return {"recording": str(path), "seconds": audio.size / 16_000, "rows": rows}


# -- the report -----------------------------------------------------------------------------------------------------

def sections(out: dict) -> list:
    s = out["settings"]
    parts = [Table(f"{s['clips']} clips, {s['audio_seconds']:.1f} s of audio; ms per clip: the median over "
                   f"{s['repeat']} rounds of the mean over the clips; {s['threads']} threads each",
                   ("engine", "ms/clip", "encoder", "x fw fp32", "x fw int8", "x alone", "= transformers",
                    "= alone", "kept/guess", "alpha", "tok/run", "c", "decode x", "WER"),
                   [[r["engine"], fmt(r["ms_per_clip"], ".0f"), fmt(_pct(r["encoder_share"]), ".0f", "-"),
                     fmt(r.get("x_faster-whisper")), fmt(r.get("x_faster-whisper-int8")),
                     fmt(r.get("x_target_alone")),
                     "-" if r["identical_to_transformers"] is None else
                     f"{r['identical_to_transformers']}/{r['clips']}",
                     "-" if "identical_to_target_alone" not in r else f"{r['identical_to_target_alone']}/{r['clips']}",
                     fmt(r.get("kept_per_guess")), fmt(r.get("alpha")), fmt(r.get("tokens_per_target_run")),
                     fmt(r.get("c")), fmt(r.get("decode_speedup")),
                     fmt(None if r.get("wer") is None else 100 * r["wer"], ".1f")]
                    for r in out["engines"]])]
    bound = out.get("encoder_bound")
    if bound:
        parts.append(Table(f"the encoder over one 30-s window against a compute bound (float32 matrix products in "
                           f"ONNX Runtime here: {bound['matmul_gflops_per_s']:.0f} GFLOP/s on {bound['threads']} "
                           "threads)", ("export", "GFLOP", "encoder ms", "bound ms", "GFLOP/s", "of the bound"),
                           [[n, fmt(e["gflops"], ".1f"), fmt(e["encoder_ms"], ".0f"), fmt(e["bound_ms"], ".0f"),
                             fmt(e["achieved_gflops_per_s"], ".0f"), fmt(e["bound_ms"] / e["encoder_ms"], ".2f")]
                            for n, e in bound["exports"].items()]))
    long = out.get("long")
    if long:
        parts.append(Table(f"long audio: {long['recording']} ({long['seconds']:.1f} s), the median of "
                           f"{s['repeat']} rounds", ("engine", "ms", "x realtime", "segments", "WER"),
                           [[r["engine"], fmt(r["ms"], ".0f"), fmt(long["seconds"] * 1000 / r["ms"], ".1f"),
                             str(r["segments"]), fmt(None if r.get("wer") is None else 100 * r["wer"], ".1f")]
                            for r in long["rows"]]))
    return parts


def _pct(x):
    return None if x is None else 100 * x


def main(argv=None) -> int:
    from .common.options import tool_main

    return tool_main("specdec-bench whisper", __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
