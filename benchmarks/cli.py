"""`specdec-bench`: latency, acceptance rate, cost ratio and speedup of an export, measured on this machine.

    specdec-bench sweep   --export DIR [--gamma 0,1,2,3,4,6,8] [--temperature 0,1] [--top-k K]
                          [--top-p P | --filters none,K:P,...] [--lenience L] [--plot OUT.png] [--profile OUT.txt]
                          [--peers [--peer-python PYTHON]] [--graph-capture]
    specdec-bench drafts  --export DIR --draft none draft lookup lookup,draft auto [--temperature 0,1] [--peers]
                          [--graph-capture]
    specdec-bench beams   (--export DIR | --shapes TARGET:DRAFT) --num-beams W [--gamma 1,2,4]
                          [--early-stopping true|false|never] [--length-penalty L] [--beam-rows 4,8,12,16 (--shapes)]
    specdec-bench shapes  TARGET:DRAFT [--gamma 0,4] [--work-dir bench-results] [--plot OUT.png]
    specdec-bench dtypes  TARGET:DRAFT --dtypes fp32,int8-draft,int8-wo-draft,int8[,int8-wo,int8-wo-fp32]
    specdec-bench serve-load --export DIR [--instances 1] [--clients 1,4,16,64] [--requests 160]
    specdec-bench width   --export DIR [--wide-export DIR] [--num-prompts 128] [--gamma 8]
    specdec-bench datastore-scale [--tokens 1000000,100000000]
    specdec-bench batch   --export DIR [--batch 1,4,16] [--draft none auto] [--temperature 0,1]
    specdec-bench gpu     [--provider cuda] [--widen t5-large:t5-small] [--dtypes fp16,fp32] [--out gpu-check.md]
    specdec-bench whisper --export [NAME=]DIR ... --weights FOLDER --prompts CLIPS.jsonl
                          [--peers faster-whisper,faster-whisper-int8,transformers] [--long RECORDING.wav]

The measuring commands take --num-prompts N, --prompts FILE (on an export), --max-new-tokens N, --repeat R,
--provider, --threads, --json OUT.json, --markdown OUT.md, --no-progress; `specdec-bench COMMAND --help` lists a
command's flags, and only those.
"""

from __future__ import annotations

import argparse
import re
import sys

from specdec.runtime.core.errors import SpecdecError, run_cli

from . import batch, datastore_scale, gpu, serve_load, whisper, width
from .beams import cli as cli_beams
from .common import options
from .common.options import RENAMED, BenchParser
from .drafts import cli as cli_drafts
from .dtypes import cli as cli_dtypes
from .shapes import cli as cli_shapes
from .sweep import cli as cli_sweep

# the tools, by their command name: (module, one line for the list of commands)
TOOLS = {"serve-load": (serve_load, "load on specdec-serve: requests/s and p50/p99 latency by clients and instances"),
         "width": (width, "would several candidates per round pay: an exact T = 0 replay and wide runs' costs"),
         "datastore-scale": (datastore_scale, "a datastore's lookup cost and memory by its size (synthetic)"),
         "batch": (batch, "batched requests: tokens/s and per-token latency by batch size, speculative vs none"),
         "gpu": (gpu, "the runtime on a GPU provider: the widened pair eager and captured, exactness, ms/token"),
         "whisper": (whisper, whisper.SUMMARY)}

# why a flag of other commands is not one of this command's, where there is more to say than that
HINTS = {("drafts", "--gamma"): "give a fixed gamma per draft as NAME:G, e.g. --draft none draft:3 lookup auto",
         ("beams", "--temperature"): "beam search is deterministic: temperature 0 only",
         ("dtypes", "--temperature"): "dtypes compares greedy decoding: temperature 0 only",
         ("dtypes", "--export"): "dtypes compares the weight variants of real-shape models, TARGET:DRAFT; on an "
                                 "export, sweep --peers times CTranslate2 int8 and float32, and an int8 export is "
                                 "measured by passing it to sweep --export"}


def parser() -> argparse.ArgumentParser:
    """The top-level parser, one subparser per command."""
    p = BenchParser(prog="specdec-bench", renamed=RENAMED, description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = p.add_subparsers(dest="command", title="commands", metavar="COMMAND", parser_class=BenchParser)
    p.commands = commands.choices                   # name -> the command's parser
    for module in (cli_sweep, cli_drafts, cli_beams, cli_shapes, cli_dtypes):
        module.add_parser(commands)
    for name, (module, summary) in TOOLS.items():
        module.add_arguments(options.command(commands, name, summary, module.run, []))
    for sub in commands.choices.values():
        sub.formatter_class = argparse.RawDescriptionHelpFormatter
    return p


def _flags(sub: argparse.ArgumentParser) -> set:
    """The flags a command takes: its usage line names each one (and -h as --help too)."""
    return set(re.findall(r"--[\w-]+", sub.format_usage())) | {"--help"}


def _check_flags(p: argparse.ArgumentParser, argv: list) -> None:
    """A flag the command does not take is one line that says which commands do take it."""
    commands = p.commands
    command = argv[0]
    if command not in commands:
        return
    own = _flags(commands[command])
    for token in argv[1:]:
        if token == "--":
            return
        flag = token.split("=", 1)[0]
        if not flag.startswith("--") or flag in own:
            continue
        others = [name for name, sub in commands.items() if flag in _flags(sub)]
        if not others:
            raise SpecdecError(f"{command} takes no flag {flag}", f"see specdec-bench {command} --help")
        why = HINTS.get((command, flag), f"a flag of {', '.join(others)}")
        raise SpecdecError(f"{flag} does not apply to {command} ({why})", f"see specdec-bench {command} --help")


def _invoked_as() -> str:
    """How the user started specdec-bench: the console script, or `python -m specdec.bench.cli`."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return "python -m specdec.bench.cli" if spec is not None and spec.name == "specdec.bench.cli" else "specdec-bench"


def _main(argv) -> int:
    argv = [str(a) for a in (sys.argv[1:] if argv is None else argv)]
    p = parser()
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        raise SpecdecError(f"specdec-bench takes a command first: {', '.join(p.commands)}",
                           "see specdec-bench --help")
    argv = p.current_names(argv)
    _check_flags(p, argv)
    args, extra = p.parse_known_args(argv)
    if extra:
        raise SpecdecError(f"unrecognized arguments: {' '.join(extra)}", f"see specdec-bench {args.command} --help")
    args.command_line = " ".join([_invoked_as()] + argv)
    return args.run(args)


def main(argv=None) -> int:
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
