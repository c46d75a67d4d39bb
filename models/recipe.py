"""specdec-models: the recipes that build what models/ ships, one step a subcommand, each with its own flags.

    specdec-models all            # data -> tokenizer -> train-target -> train-draft -> package -> datastore -> evaluate
    specdec-models train-draft --resume --draft-max-minutes 19
    specdec-models whisper-draft --target ~/.cache/specdec/whisper/base
    specdec-models STEP --help

The bundled pair: `all`, or its steps one at a time (`data`, `tokenizer`, `train-target`, `train-draft` (also
`distill`), `package`, `datastore`, `evaluate`); `widen` writes it at real T5 shapes, computing the same function.
The speech pair: `speech` runs `speech-data`, `speech-target`, `speech-decoders`, `speech-package` and
`speech-evaluate`; `speech-checkpoint` makes Hugging Face checkpoints of it, `speech-gpu` trains it on a GPU machine
in one command and `speech-unpack` writes that run's pieces to models/speech/. `whisper-draft` distills a draft for a
real Whisper target (whisper base's ships in models/whisper-base-draft/), resuming where an interrupted run stopped.

Everything downloaded or cached goes into --work-dir (default models/.work/, git-ignored); only the packaging steps
write the committed files. Never run in CI: the bundled pair takes about 88 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from specdec.runtime.core.errors import OneLineParser, SpecdecError, run_cli

HERE = os.path.dirname(os.path.abspath(__file__))

SPEECH_RUN = ["speech-data", "speech-target", "speech-decoders", "speech-package", "speech-evaluate"]
SPEECH_STAGES = ["speech", *SPEECH_RUN, "speech-checkpoint", "speech-gpu", "speech-unpack"]

# Each hyperparameter's default and help. The committed pair was trained by this recipe as of commit 5d2fde6
# (62-min target cap, 4,000 draft steps, no sequence-level distillation); these defaults were measured end to end
# at 88 min (models/README.md).
HYPERPARAMETERS = dict(
    seed=(0, "seed for data order, initialisation and the distillation subset"),
    vocab_size=(4096, "tokenizer pieces (shared by both models)"),
    target_steps=(7500, "scheduled target steps (cosine schedule length)"),
    target_max_minutes=(60.0, "time budget of the target's training: the lr schedule ends at it or at the last "
                              "step"),
    target_batch=(32, "pairs per target step"),
    target_lr=(1e-2, "peak lr (relative: x RMS of each tensor)"),
    target_warmup=(400, "linear warmup steps"),
    target_dropout=(0.0, "T5 dropout_rate while training the target"),
    draft_steps=(3600, "scheduled draft steps"),
    draft_max_minutes=(19.0, "time budget of the draft's training (same rule)"),
    draft_batch=(32, "pairs per draft step"),
    draft_lr=(1e-2, "peak lr of the draft"),
    draft_warmup=(200, "draft warmup steps"),
    kl_weight=(0.8, "loss = (1 - w) CE(reference) + w KL(target || draft)"),
    seq_kd_sources=(18000, "training sources the target decodes greedily for sequence-level distillation (0: off)"),
    seq_kd_repeat=(2, "how many times each target output joins the draft's training set"),
)


# Each step's flags, by group: a step takes the groups STEP_FLAGS names (and --work-dir, --threads, --seed).
def _training(p):
    p.add_argument("--resume", action="store_true", help="continue training from the last checkpoint")
    p.add_argument("--plain-adamw", action="store_true",
                   help="one absolute lr for every tensor instead of lr x RMS(tensor) (then use lr ~1e-3)")
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16",
                   help="training matmul precision (default bf16; fp32 on CPUs without BF16)")


def _out_dir(p):
    p.add_argument("--out-dir", default=HERE, help="where the packaged models are written (default: models/)")


def _hyper(*prefixes):
    def add(p):
        for k, (v, text) in HYPERPARAMETERS.items():
            if k != "seed" and k.startswith(prefixes):
                p.add_argument("--" + k.replace("_", "-"), type=type(v), default=v, help=f"{text} (default {v})")
    return add


def _refresh(p):
    p.add_argument("--refresh-data", action="store_true", help="re-run the apt-get updates")


def _widen(p):
    p.add_argument("--target-shape", default="t5-large", help="the target's shape, t5-small, t5-base or t5-large "
                                                               "(default t5-large)")
    p.add_argument("--draft-shape", default="t5-small", help="the draft's shape (default t5-small)")
    p.add_argument("--out", required=True, help="where target/ and draft/ are written (outside the repository: "
                                                "t5-large is 2.9 GB)")


def _clips(p):
    p.add_argument("--speech-clips", default="24000,500,500",
                   help="clips of the train, validation and test splits (default 24000,500,500; speech-gpu makes the "
                        "first two)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                   help="processes that synthesize the clips (default: every core, %(default)s here)")


def _device(p):
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                   help="where to train (default auto: a CUDA GPU when PyTorch sees one)")


def _speech_target(p):
    p.add_argument("--speech-minutes", type=float, default=60.0,
                   help="time budget of the speech target's training (default 60)")
    p.add_argument("--speech-batch", type=int, default=None, help="clips a step (default 8; speech-gpu on a GPU 64)")
    p.add_argument("--speech-width", type=int, default=None,
                   help="the target's shape by d_model, 256 (4 encoder and 4 decoder layers; a 2-layer draft) or 384 "
                        "(whisper-tiny's width and encoder, 12 decoder layers; a 1-layer draft); default 256, "
                        "speech-gpu on a GPU 384; --resume goes on at the checkpoint's")


def _speech_decoders(p):
    p.add_argument("--speech-decoder-minutes", type=float, default=20.0,
                   help="the target decoder's time on the frozen encoder (default 20)")
    p.add_argument("--speech-draft-minutes", type=float, default=10.0,
                   help="the draft's distillation on the frozen encoder (default 10)")
    p.add_argument("--speech-target-layers", type=int, default=None,
                   help="grow the target's decoder to this many layers first, each added layer starting as the "
                        "identity (default: keep its depth)")


def _speech_eval(p):
    p.add_argument("--speech-long-syntheses", type=int, default=1,
                   help="syntheses of the long recording to transcribe (seed xor 0, 1, ...; its WER moves a few "
                        "points between them; default 1)")


def _speech_gpu(p):
    p.add_argument("--out", default="speech-gpu", help="where its record and the pack's pieces are written")
    p.add_argument("--from-pack", action="store_true",
                   help="on a work directory without a checkpoint, go on from the pack in --out-dir/speech instead of "
                        "training from scratch (the optimizer and CTC head afresh)")
    p.add_argument("--budget-s", type=float, default=480.0,
                   help="seconds for the whole step, data to pieces (default 480)")
    p.add_argument("--speech-batch", type=int, default=None, help="clips a step (default 8; on a GPU 64)")
    p.add_argument("--speech-width", type=int, default=None,
                   help="the target's d_model, 256 or 384 (default: 384 on a GPU, else 256)")


def _whisper_draft(p):
    p.add_argument("--target", required=True,
                   help="the Whisper target: a Hugging Face or CTranslate2 / faster-whisper folder (e.g. "
                        "~/.cache/specdec/whisper/base after python -m specdec.bench.whisper_models fetch base)")
    p.add_argument("--out", default=os.path.join(HERE, "whisper-base-draft"),
                   help="where the draft is packaged (default: models/whisper-base-draft)")
    p.add_argument("--clips", type=int, default=2048, help="synthesized clips the target transcribes (default 2048)")
    p.add_argument("--minutes", type=float, default=15.0, help="the draft's training time (default 15)")
    p.add_argument("--only", choices=["data", "train", "package"], action="append",
                   help="run only these parts (repeatable; default: data, train and package in turn)")


RECIPE = [_refresh, _hyper("vocab", "target", "draft", "kl", "seq"), _training, _out_dir]
STEP_FLAGS = {
    "all": (RECIPE, "the whole recipe: data -> tokenizer -> train-target -> train-draft -> package -> datastore -> "
                    "evaluate"),
    "data": ([_refresh], "the corpus: Debian package descriptions (English and German) and the test prompts"),
    "tokenizer": ([_hyper("vocab")], "the SentencePiece tokenizer both models share"),
    "train-target": ([_hyper("target"), _training], "train the bundled target"),
    "train-draft": ([_hyper("draft", "kl", "seq"), _training], "distill the bundled draft from the target"),
    "distill": ([_hyper("draft", "kl", "seq"), _training], "the same as train-draft"),
    "package": ([_out_dir], "write models/target, models/draft and models/prompts/test.jsonl"),
    "datastore": ([_out_dir], "write models/datastore/ (the training split's target side)"),
    "evaluate": ([_out_dir], "measure the packaged pair (acceptance, speedup, quality): the model card's figures"),
    "widen": ([_widen], "the bundled pair at real T5 shapes, computing the same function"),
    "speech": ([_clips, _speech_target, _speech_decoders, _speech_eval, _device, _training, _out_dir],
               "the speech pair: speech-data, speech-target, speech-decoders, speech-package and speech-evaluate"),
    "speech-data": ([_clips], "espeak-ng clips and their log-mel features under --work-dir/speech"),
    "speech-target": ([_speech_target, _device, _training], "the speech target: encoder and decoder with a CTC head"),
    "speech-decoders": ([_speech_decoders, _device, _training],
                        "the decoders on the frozen encoder's outputs, the draft distilled"),
    "speech-package": ([_out_dir], "write models/speech/"),
    "speech-evaluate": ([_speech_eval, _out_dir], "measure the packaged speech pair"),
    "speech-checkpoint": ([lambda p: p.add_argument("--out", required=True,
                                                    help="where the speech pair's checkpoints are written")],
                          "Hugging Face checkpoints of the committed speech pair, for specdec-export"),
    "speech-gpu": ([_speech_gpu, _clips, _device, _out_dir],
                   "train the speech pair on a GPU machine in one command (data, target, draft and package against "
                   "--budget-s, the pack written in pieces to --out)"),
    "speech-unpack": ([lambda p: p.add_argument("--out", required=True, help="where speech-gpu wrote its pieces"),
                       _out_dir], "write speech-gpu's pieces to models/speech/"),
    "whisper-draft": ([_whisper_draft], "distill a 2-layer draft for a real Whisper target from its own "
                                        "transcripts of synthesized everyday speech (resumes where it stopped)"),
}
STAGES = ["data", "tokenizer", "train-target", "train-draft", "package", "datastore", "evaluate"]


def build_parser():
    ap = OneLineParser(prog="specdec-models", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="stage", metavar="{" + ",".join(STEP_FLAGS) + "}", required=True,
                            parser_class=OneLineParser)
    for name, (groups, text) in STEP_FLAGS.items():
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("--work-dir", default=os.path.join(HERE, ".work"),
                       help="downloads, caches, checkpoints (default: models/.work)")
        p.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1), help="torch threads")
        p.add_argument("--seed", type=int, default=0, help="seed for data order, initialisation and sampling")
        for group in groups:
            group(p)
    return ap


def main(argv=None) -> int:
    # Passive OpenMP waiting: the run shares two cores with other work without spinning threads.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return run_cli(_main, argv)


def _main(argv) -> int:
    args = build_parser().parse_args(argv)
    if args.stage == "widen":
        from .widen import run_widen

        run_widen(args)
        return 0
    if args.stage in SPEECH_STAGES:
        return _speech(args)
    if args.stage == "whisper-draft":
        from .whisper_draft import run

        run(args.work_dir, os.path.expanduser(args.target), os.path.abspath(args.out), args.clips, args.minutes,
            args.seed, args.threads, steps=args.only or ("data", "train", "package"))
        return 0
    stage = "train-draft" if args.stage == "distill" else args.stage
    stages = STAGES if stage == "all" else [stage]
    work = os.path.abspath(args.work_dir)
    os.makedirs(work, exist_ok=True)
    t_all = time.time()
    for st in stages:
        t0 = time.time()
        print(f"=== {st} ===", flush=True)
        if st == "data":
            from .data import run_data

            run_data(work, refresh=args.refresh_data)
        elif st == "tokenizer":
            from .tok import train_tokenizer

            train_tokenizer(work, vocab_size=args.vocab_size, seed=args.seed)
        elif st == "train-target":
            from .train import TARGET_CONFIG, train_model

            train_model("target", work, TARGET_CONFIG, steps=args.target_steps, batch_size=args.target_batch,
                        lr=args.target_lr, warmup=args.target_warmup, seed=args.seed, threads=args.threads,
                        resume=args.resume, max_minutes=args.target_max_minutes, precision=args.precision,
                        rms_scaling=not args.plain_adamw, dropout=args.target_dropout)
        elif st == "train-draft":
            from .train import DRAFT_CONFIG, train_model

            train_model("draft", work, DRAFT_CONFIG, steps=args.draft_steps, batch_size=args.draft_batch,
                        lr=args.draft_lr, warmup=args.draft_warmup, seed=args.seed + 1, threads=args.threads,
                        resume=args.resume, teacher_dir=os.path.join(work, "target"), kl_weight=args.kl_weight,
                        max_minutes=args.draft_max_minutes, precision=args.precision,
                        rms_scaling=not args.plain_adamw, seq_kd_sources=args.seq_kd_sources,
                        seq_kd_repeat=args.seq_kd_repeat)
        elif st == "package":
            from .evaluate import package

            package(work, os.path.abspath(args.out_dir), seed=args.seed)
        elif st == "datastore":
            from .datastore import run_datastore

            run_datastore(work, os.path.abspath(args.out_dir))
        elif st == "evaluate":
            from .evaluate import evaluate

            evaluate(os.path.abspath(args.out_dir), work, threads=args.threads, seed=args.seed)
        print(f"=== {st} done in {(time.time() - t0) / 60:.1f} min ===", flush=True)
    print(f"total {(time.time() - t_all) / 60:.1f} min", flush=True)
    return 0


def _speech(args) -> int:
    """The speech pair's stages (`speech` runs them all in order; each resumes where an interrupted run stopped)."""
    work = os.path.abspath(args.work_dir)
    stages = SPEECH_RUN if args.stage == "speech" else [args.stage]
    for st in stages:
        t0 = time.time()
        print(f"=== {st} ===", flush=True)
        if st == "speech-data":
            from .speech_data import run_speech_data

            run_speech_data(work, *_clip_counts(args.speech_clips), seed=args.seed,
                            workers=args.workers)
        elif st == "speech-target":
            from .speech_train import train

            train(st, work, args.speech_minutes, steps=100_000, batch=args.speech_batch or 8, lr=1e-3, warmup=300,
                  seed=args.seed, threads=args.threads, resume=args.resume or args.stage == "speech",
                  precision=args.precision, width=args.speech_width, device=args.device,
                  log=lambda m: print(m, flush=True))
        elif st == "speech-decoders":
            from .speech_train import train_decoders

            train_decoders(work, args.speech_decoder_minutes, args.speech_draft_minutes, seed=args.seed,
                           threads=args.threads, resume=args.resume, target_layers=args.speech_target_layers,
                           device=args.device, log=lambda m: print(m, flush=True))
        elif st == "speech-package":
            from .speech_pack import pack

            pack(work, os.path.join(os.path.abspath(args.out_dir), "speech"))
        elif st == "speech-gpu":
            from .speech_gpu import run_gpu

            run_gpu(work, os.path.abspath(args.out_dir), os.path.abspath(args.out or "speech-gpu"),
                    clips=_clip_counts(args.speech_clips)[:2], width=args.speech_width, batch=args.speech_batch,
                    workers=args.workers, device=args.device,
                    budget_s=args.budget_s, seed=args.seed, threads=args.threads, from_pack=args.from_pack,
                    log=lambda m: print(m, flush=True))
        elif st == "speech-unpack":
            from .speech_gpu import unpack

            unpack(args.out, os.path.abspath(args.out_dir))
        elif st == "speech-checkpoint":
            from .speech_pack import run_checkpoint

            run_checkpoint(args.out)
        elif st == "speech-evaluate":
            from .speech_eval import evaluate

            if args.speech_long_syntheses < 1:
                raise SpecdecError(f"--speech-long-syntheses must be at least 1 (got {args.speech_long_syntheses})",
                                   "pass 1 for one synthesis of the long recording, or more")
            evaluate(os.path.abspath(args.out_dir), work, threads=args.threads, seed=args.seed,
                     syntheses=args.speech_long_syntheses)
        print(f"=== {st} done in {(time.time() - t0) / 60:.1f} min ===", flush=True)
    return 0


def _clip_counts(text: str) -> tuple:
    counts = text.split(",")
    if len(counts) != 3 or not all(c.strip().isdigit() for c in counts):
        raise SpecdecError(f"--speech-clips {text!r} is not three counts",
                           "pass train,validation,test clip counts, e.g. 24000,500,500")
    return tuple(int(c) for c in counts)


if __name__ == "__main__":
    sys.exit(main())
