"""The flags of specdec-bench's commands: a parser whose errors are one line, the value types, and the groups of
flags several commands share (each command's parser takes the groups it uses as argparse parents, so its --help
lists only what applies to it). The request parameters keep the names runtime/core/params.py declares."""

from __future__ import annotations

import argparse
import json
import sys

from specdec.runtime.core import options as load_options
from specdec.runtime.core.errors import OneLineParser, run_cli


PROMPT_FILE = ("JSONL ({\"source\": ...} a line) or plain text, one prompt a line (default: the bundled test prompts "
               "for the bundled pair, else random ids)")
AUDIO_PROMPTS = ("; a Whisper export: JSONL of {\"audio\": \"clip.wav\"} lines (16 kHz WAV files, paths relative to "
                 "the file; optional \"language\", default en), else random audio")
# earlier flag names, accepted for one release
RENAMED = {"--engine": "--export", "--wide-engine": "--wide-export", "--workdir": "--work-dir"}


class BenchParser(OneLineParser):
    """The commands' one-line-error parser (runtime/core/errors.py), taking flags as spelled, never abbreviated: --draft
    would otherwise be sweep's --draft-checkpoint."""

    def __init__(self, *args, allow_abbrev: bool = False, **kwargs):
        super().__init__(*args, allow_abbrev=allow_abbrev, **kwargs)


def write_figures(path: str | None, figures) -> None:
    """A tool's --json: its figures as they are, when a path is given."""
    if path:
        with open(path, "w") as fh:
            json.dump(figures, fh, indent=1)


def show(parts, path: str | None, figures) -> None:
    """A tool's report: its parts (tables.render) printed, and its figures written to --json when a path is given."""
    from .tables import render

    print(render(parts))
    write_figures(path, figures)


def tool_main(prog: str, doc: str, add_arguments, run, argv=None) -> int:
    """A tool's `python -m specdec.bench.<module>`: its subcommand's flags under the module's name, run the same way
    (args.command_line: the command as typed)."""
    p = BenchParser(prog=prog, renamed=RENAMED, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]

    def body(argv):
        args = p.parse_args(argv)
        args.command_line = " ".join([prog] + argv)
        return run(args)
    return run_cli(body, argv)


def command(commands, name: str, summary: str, run, parents: list) -> argparse.ArgumentParser:
    """A command's parser: its line in the list of commands, its --help (the docstring of `run`'s module), the
    groups of flags it takes (`parents`) and what runs it."""
    p = commands.add_parser(name, help=summary, description=sys.modules[run.__module__].__doc__, parents=parents)
    p.set_defaults(run=run)
    return p


def group(title: str) -> tuple:
    """A parent parser (no -h of its own) with one titled group to add its flags to."""
    parent = argparse.ArgumentParser(add_help=False)
    return parent, parent.add_argument_group(title)


def number_list(text: str, kind, example: str, what: str) -> list:
    try:
        values = sorted({kind(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated {what}, e.g. {example} (got '{text}')") from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"expected {what} >= 0 (got '{text}')")
    return values


def int_list(text: str) -> list[int]:
    return number_list(text, int, "0,2,4", "integers")


def float_list(text: str) -> list[float]:
    return number_list(text, float, "0,1", "temperatures")


def declared(name: str) -> str:
    """The one line runtime/core/params.py declares for request parameter `name` (its --help everywhere)."""
    from specdec.runtime.core.params import PARAMETERS

    return next(p.doc for p in PARAMETERS if p.name == name)


# -- the groups ---------------------------------------------------------------------------------------------------

def engine() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--export", dest="engine", required=True, metavar="DIR",
                        help="export directory made by specdec-export")
    return parent


def pair(p, whisper: bool = False) -> None:
    """The TARGET:DRAFT argument (`whisper`: Whisper names too, `shapes` only)."""
    names = "t5-small, t5-base, t5-large" + (
        "; or openai/whisper-tiny, -base, -small, -medium, -large-v3 and distil-whisper/distil-large-v3" if whisper
        else "")
    example = "t5-large:t5-small" + (" or openai/whisper-large-v3:distil-whisper/distil-large-v3" if whisper else "")
    p.add_argument("pair", metavar="TARGET:DRAFT",
                   help=f"random-initialised models with official configurations ({names}), e.g. {example}")


def prompts(every_task: bool, audio: bool = False) -> argparse.ArgumentParser:
    """--prompts and --num-prompts; `audio`: the command takes a Whisper export's audio clips too."""
    parent, g = group("prompts")
    g.add_argument("--prompts", metavar="FILE", help=PROMPT_FILE + (AUDIO_PROMPTS if audio else ""))
    g.add_argument("--num-prompts", type=int, default=8, metavar="N",
                   help="prompts to use, round-robin over the prompts' tasks, so N gives N/tasks of each (default 8; "
                        "0 = all" + ("; at least one per task)" if every_task else ")"))
    return parent


def random_prompts(audio: bool = False) -> argparse.ArgumentParser:
    """Random prompts; `audio`: a Whisper pair's are random audio requests instead (--num-prompts defaults to None,
    the command settles it per pair)."""
    parent, g = group("prompts (random ids" + (", or random audio for a Whisper pair)" if audio else ")"))
    g.add_argument("--num-prompts", type=int, default=None if audio else 8, metavar="N",
                   help="random prompts (default 8; 0: 4)" + ("; a Whisper pair: random audio requests filling the "
                                                              "encoder's 30 s window (default and 0: 2)" if audio
                                                              else ""))
    g.add_argument("--source-length", type=int, default=48, metavar="N",
                   help="their length in tokens (default 48" + ("; T5 pairs)" if audio else ")"))
    return parent


def speech_shapes() -> argparse.ArgumentParser:
    """What `shapes` measures on a Whisper pair only."""
    parent, g = group("Whisper pairs")
    g.add_argument("--encoder-repeats", type=int, default=3, metavar="N",
                   help="timed encoder runs per model, after one untimed (default 3)")
    g.add_argument("--request-tokens", type=int, default=100, metavar="N",
                   help="tokens of the request whose speedup is predicted with the encoders' share (default 100, "
                        "about 30 s of English speech)")
    return parent


def run(*, max_new_tokens: int, repeat: int, repeat_help: str, past: str,
        graph_capture: bool = False) -> argparse.ArgumentParser:
    """How long and how often every configuration runs, and on what (`graph_capture`: the command times one loaded
    export, which --graph-capture may load through its capturable graphs)."""
    parent, g = group("runs")
    g.add_argument("--max-new-tokens", type=int, default=max_new_tokens, metavar="N",
                   help=f"{declared('max_new_tokens')} (default {max_new_tokens})")
    g.add_argument("--repeat", type=int, default=repeat, metavar="R", help=f"{repeat_help} (default {repeat})")
    # the load options the bench takes, from their declaration (runtime/core/options.py)
    load_options.add_flags(g, "bench", leave_out=() if graph_capture else ("graph_capture",),
                           notes={"graph_capture": "every configuration is then timed on those graphs"})
    g.add_argument("--probe-repeats", type=int, default=30, metavar="N",
                   help="repeats of each per-call cost measurement")
    g.add_argument("--past", type=int, default=None, metavar="N",
                   help=f"decoder past length for the per-call costs (default {past})")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parent


def output(plot: bool = False, markdown: str = "write the tables as Markdown") -> argparse.ArgumentParser:
    parent, g = group("output")
    g.add_argument("--json", metavar="OUT.json", help="write the full report as JSON")
    g.add_argument("--markdown", metavar="OUT.md", help=markdown)
    if plot:
        g.add_argument("--plot", metavar="OUT.png", help="write measured vs predicted speedup over gamma")
    return parent


def sampling(temperatures: bool, several_filters: bool) -> argparse.ArgumentParser:
    """What every configuration samples with: temperatures (a list), one top-k/top-p filter or several, lenience."""
    parent, g = group("sampling (every configuration)")
    if temperatures:
        g.add_argument("--temperature", type=float_list, default=[0.0, 1.0], metavar="T,...",
                       help=f"comma-separated values of: {declared('temperature')} (default 0,1)")
    g.add_argument("--top-k", type=int, default=None, metavar="K",
                   help=f"{declared('top_k')} (default 0)" + ("; --filters compares several" if several_filters
                                                              else ""))
    g.add_argument("--top-p", type=float, default=None, metavar="P", help=f"{declared('top_p')} (default 1.0)")
    g.add_argument("--filters", action="append", metavar="none,K:P,...",
                   help=("top_k:top_p filters to sweep, interleaved like gamma, e.g. none,50:0.9 (none = 0:1, plain "
                         "sampling; repeatable); with more than one, none is always added and a table gives each "
                         "filter's ms/token over plain sampling's (default: the one filter of --top-k/--top-p)")
                   if several_filters else "the one top_k:top_p filter, as --top-k/--top-p give it (none or K:P)")
    g.add_argument("--lenience", type=float, default=1.0, metavar="L",
                   help=f"{declared('lenience')} (default 1.0)")
    return parent


def peers(what: str, gamma: str) -> argparse.ArgumentParser:
    """The other engines timed after the command's own table (`what`: specdec's speculative row; `gamma`: what
    --peer-gamma sets, and its default)."""
    parent, g = group("peers")
    g.add_argument("--peers", action="store_true",
                   help="also time transformers greedy, transformers assisted generation and CTranslate2 greedy "
                        "(and Optimum's ONNX Runtime T5 with --peer-python) on the same checkpoints and prompts "
                        f"(temperature 0), beside {what}")
    g.add_argument("--peer-gamma", type=int, default=None, metavar="G",
                   help=f"gamma of {gamma} in the peer comparison")
    g.add_argument("--peer-repeat", type=int, default=None, metavar="R",
                   help="repeats of the peer comparison (default --repeat)")
    g.add_argument("--peer-python", metavar="PYTHON",
                   help="--peers: also time Optimum's ONNX Runtime T5 (optimum-onnx's ORTModelForSeq2SeqLM, greedy "
                        "and assisted generate) with this interpreter of a separate venv that has optimum-onnx, "
                        "onnxruntime and torch, in its own process (its ONNX exports are cached under "
                        "--work-dir/optimum)")
    g.add_argument("--peer-timeout", type=float, default=None, metavar="S",
                   help="--peer-python: seconds the Optimum worker may take, exports included (default 1800)")
    g.add_argument("--target-checkpoint", metavar="DIR",
                   help="the target checkpoint the export was made from (default: the path in its manifest)")
    g.add_argument("--draft-checkpoint", metavar="DIR",
                   help="the draft checkpoint (default: the path in the export's manifest)")
    g.add_argument("--work-dir", default="bench-results", metavar="DIR",
                   help="cache for CTranslate2 conversions and Optimum's exports (default ./bench-results)")
    return parent


def on_export(sweep: bool, repeat_help: str, peer_texts: tuple[str, str]) -> list:
    """The parents of a command that measures generations on an export: `sweep` (several filters and a plot; each
    prompt task at least once otherwise, as `drafts` needs) and the peers' texts (peers())."""
    return [engine(), prompts(every_task=not sweep, audio=not sweep),
            sampling(temperatures=True, several_filters=sweep),
            run(max_new_tokens=64, repeat=5, repeat_help=repeat_help, past="max_new_tokens/2", graph_capture=True),
            output(plot=sweep),
            peers(*peer_texts)]


def export_shapes(gamma_max: bool = True, keep: bool = True, title: str = "real-shape models"):
    """Where and how the real-shape models are built and exported (cached)."""
    parent, g = group(title)
    g.add_argument("--work-dir", default="bench-results", metavar="DIR",
                   help="cache for the random checkpoints, their exports and CTranslate2 conversions (default "
                        "./bench-results)")
    if gamma_max:
        g.add_argument("--gamma-max", type=int, default=8, metavar="G", help="gamma_max of the export (default 8)")
    g.add_argument("--max-length", type=int, default=256, metavar="N", help="max_length of the export (default 256)")
    if keep:
        g.add_argument("--keep-checkpoints", action="store_true",
                       help="keep the random PyTorch checkpoints next to the export")
    return parent
