"""What a speech pair's shape costs a decoder step, before training it: random-weight Whisper pairs on the speech
vocabulary and window (models/speech_train.py's configuration, the draft keeping the target's encoder), exported
with specdec-export and timed by the cost probe (the fused target step and draft step at one past length, median of
`--repeats`), all candidates in one process, twice in alternating order. The cost of a step does not depend on the
weights, so c (draft step / target step) is known before a GPU trains the pair.

    python -m specdec.bench.speech_shapes [--repeats 200] [--work-dir DIR] [--json F] [--markdown F]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from specdec.runtime.core.errors import OneLineParser, run_cli


def _shape(d_model: int, decoder_layers: int, encoder_layers: int = 4) -> dict:
    """A Whisper shape as the speech pair's are: 64-wide heads, FFN 4x d_model."""
    return dict(d_model=d_model, encoder_layers=encoder_layers, decoder_layers=decoder_layers,
                encoder_attention_heads=d_model // 64, decoder_attention_heads=d_model // 64,
                encoder_ffn_dim=4 * d_model, decoder_ffn_dim=4 * d_model)


# name: (the target's shape, the draft's decoder layers)
CANDIDATES = {
    "256, 4 encoder + 12 decoder layers / 2": (_shape(256, 12), 2),
    "384, 4 encoder + 8 decoder layers / 2": (_shape(384, 8), 2),
    "384, 4 encoder + 8 decoder layers / 1": (_shape(384, 8), 1),
    "384, 4 encoder + 12 decoder layers / 2": (_shape(384, 12), 2),
    "384, 4 encoder + 12 decoder layers / 1": (_shape(384, 12), 1),
    "384, 4 encoder + 16 decoder layers / 2": (_shape(384, 16), 2),
    "512, 6 encoder + 6 decoder layers / 2": (_shape(512, 6, encoder_layers=6), 2),
}
PAST = 40                       # past length of the probe: a 10 s clip's transcript is 30-110 tokens


def build(shape: dict, draft_layers: int, folder: str) -> dict:
    """The random pair of a candidate saved and exported under `folder`; its parameter counts."""
    import torch

    from specdec.models import speech_train as st
    from specdec.models import speech_vocab as sv
    from specdec.models.speech_data import WINDOW_S

    specials = sv.write_speech_tokenizer(os.path.join(folder, "tokenizer"), WINDOW_S)
    config = st.target_config(specials)
    for k, v in shape.items():
        setattr(config, k, v)
    torch.manual_seed(0)
    from transformers import WhisperForConditionalGeneration

    target = WhisperForConditionalGeneration(config).eval()
    draft = st.draft_from(target, draft_layers).eval()
    for role, model in (("target", target), ("draft", draft)):
        sv.save_speech_checkpoint(model, os.path.join(folder, role), WINDOW_S)
    subprocess.run([sys.executable, "-m", "specdec.export.cli", "--target", os.path.join(folder, "target"), "--draft",
                    os.path.join(folder, "draft"), "--export", os.path.join(folder, "export"), "--gamma-max", "8",
                    "--max-length", "160", "--force"], check=True, stdout=subprocess.DEVNULL)
    decoder = sum(p.numel() for n, p in draft.named_parameters() if not n.startswith("model.encoder."))
    return {"target_params_M": round(sum(p.numel() for p in target.parameters()) / 1e6, 1),
            "draft_decoder_params_M": round(decoder / 1e6, 1)}


def measure(candidates: dict, work: str, repeats: int = 200, log=print) -> dict:
    """{name: parameters, the target and draft step in ms and c of each of two passes, their mean c}."""
    from specdec.runtime import SpeculativeDecoder

    from .common.costs import probe

    rows, decoders = {}, {}
    for k, (name, (shape, draft_layers)) in enumerate(candidates.items()):
        folder = os.path.join(work, f"candidate-{k}")
        rows[name] = build(shape, draft_layers, folder)
        # the default threads (the target a thread per core, the draft one), as users run it: two pools of two
        # threads each contend on a 2-core machine and double the target's step
        decoders[name] = SpeculativeDecoder.load(os.path.join(folder, "export"), provider="cpu")
        log(f"built {name}: {rows[name]}")
    audio = np.random.default_rng(0).standard_normal(16_000 * 6).astype(np.float32) * 0.05
    names = list(candidates)
    for p in range(2):
        for name in names if p == 0 else names[::-1]:
            got = probe(decoders[name], audio, past=PAST, repeats=repeats, counts=[1])
            rows[name].setdefault("passes", []).append({"target_step_ms": round(got["target_step_ms"], 3),
                                                        "draft_step_ms": round(got["draft_step_ms"], 3),
                                                        "c": round(got["c"], 3)})
            log(f"pass {p + 1}: {name}: {rows[name]['passes'][-1]}")
    for row in rows.values():
        row["c"] = round(sum(q["c"] for q in row["passes"]) / len(row["passes"]), 3)
    return rows


def markdown(rows: dict, repeats: int) -> str:
    lines = ["| target (d_model, layers) / draft decoder layers | target M | draft decoder M | target step ms | "
             "draft step ms | c (two passes) | c |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, r in rows.items():
        steps = " / ".join(f"{q['target_step_ms']:.2f}" for q in r["passes"])
        drafts = " / ".join(f"{q['draft_step_ms']:.2f}" for q in r["passes"])
        cs = " / ".join(f"{q['c']:.3f}" for q in r["passes"])
        lines.append(f"| {name} | {r['target_params_M']} | {r['draft_decoder_params_M']} | {steps} | {drafts} | {cs} | "
                     f"{r['c']:.3f} |")
    return "\n".join(lines) + f"\n\nCPU provider, past length {PAST}, median of {repeats} fused runs a pass.\n"


def main(argv=None) -> int:
    return run_cli(_main, argv)


def _main(argv) -> int:
    import argparse

    ap = OneLineParser(prog="python -m specdec.bench.speech_shapes", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=200, help="fused runs a probe (default 200)")
    ap.add_argument("--work-dir", help="where the random pairs are written (default: a temporary folder)")
    ap.add_argument("--json", help="write the rows as JSON")
    ap.add_argument("--markdown", help="write the table as Markdown")
    args = ap.parse_args(argv)
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        rows = measure(CANDIDATES, args.work_dir or tmp, args.repeats)
    text = markdown(rows, args.repeats)
    print(text + f"({time.time() - started:.0f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
