"""What specdec-bench's commands share when they run: the settled flags (defaults that depend on others, the
checks argparse cannot make), the sampling filters, loading an export, the machine line, the progress bar, the
cost probe, the peers' table and writing the report."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from specdec.runtime.core.errors import SpecdecError

from . import machine
from .runs import PLAIN, filter_label


# -- flags ---------------------------------------------------------------------------------------------------------

def export_checked(args) -> None:
    """The flags of a command that measures generations on an export (sweep, drafts), settled and checked."""
    peers_checked(args)
    runs_checked(args, past=max(1, args.max_new_tokens // 2))
    sampling_checked(args)


def runs_checked(args, past: int) -> None:
    """--past defaults to `past`; --max-new-tokens and --repeat are at least 1."""
    if args.past is None:
        args.past = past
    if args.max_new_tokens < 1 or args.repeat < 1:
        raise SpecdecError("--max-new-tokens and --repeat must be at least 1")


def sampling_checked(args) -> None:
    """--lenience in (0, 1]; args.filters becomes the sweep's (top_k, top_p) filters."""
    if not 0.0 < args.lenience <= 1.0:
        raise SpecdecError(f"--lenience must be in (0, 1] (got {args.lenience:g})", "use 1.0 for exact sampling")
    args.filters = _filters(args)


def one_filter(args, command: str) -> None:
    if len(args.filters) > 1:
        raise SpecdecError(f"{command} measures one filter (got --filters "
                           f"{','.join(map(filter_label, args.filters))})", "give --filters a single entry")


def with_baseline(gammas: list) -> list:
    """The gammas with 0 (the baseline) first when it is not among them."""
    return gammas if 0 in gammas else [0] + gammas


def peers_checked(args) -> None:
    if (args.peer_python or args.peer_timeout is not None) and not args.peers:
        raise SpecdecError("--peer-python and --peer-timeout add Optimum to the --peers comparison", "add --peers")
    if args.peer_timeout is not None and args.peer_timeout <= 0:
        raise SpecdecError(f"--peer-timeout must be positive (got {args.peer_timeout:g})",
                           "e.g. --peer-timeout 1800")


def _checked_filter(top_k, top_p, k_name: str = "--top-k", p_name: str = "--top-p") -> tuple[int, float]:
    if top_k < 0:
        raise SpecdecError(f"{k_name} must be an integer >= 0 (got {top_k})", "use 0 to disable top-k")
    if not 0.0 < top_p <= 1.0:
        raise SpecdecError(f"{p_name} must be in (0, 1] (got {top_p:g})", "use 1.0 to disable top-p")
    return int(top_k), float(top_p)


def _parse_filter(item: str) -> tuple[int, float]:
    """One --filters entry: `none` (no filter) or TOP_K:TOP_P."""
    if item.lower() == "none":
        return PLAIN
    try:
        k_text, p_text = item.split(":")
        top_k, top_p = int(k_text), float(p_text)
    except ValueError:
        raise SpecdecError(f"--filters takes none or TOP_K:TOP_P entries (got '{item}')",
                           "e.g. --filters none,50:0.9") from None
    return _checked_filter(top_k, top_p, f"top_k in --filters '{item}'", f"top_p in --filters '{item}'")


def _filters(args) -> list[tuple[int, float]]:
    """The sweep's (top_k, top_p) filters: the --filters entries in order, `none` first whenever there are
    several (each filter's cost is compared with it), or else the one filter of --top-k/--top-p."""
    if not args.filters:
        return [_checked_filter(0 if args.top_k is None else args.top_k, 1.0 if args.top_p is None else args.top_p)]
    if args.top_k is not None or args.top_p is not None:
        raise SpecdecError("--filters and --top-k/--top-p both given", "give every filter in --filters, e.g. "
                                                                      "--filters none,50:0.9")
    filters = list(dict.fromkeys(_parse_filter(item.strip()) for text in args.filters
                                 for item in text.split(",") if item.strip()))
    if not filters:
        raise SpecdecError("--filters is empty", "e.g. --filters none,50:0.9")
    return list(dict.fromkeys([PLAIN] + filters)) if len(filters) > 1 else filters


def base_params(args):
    """The request parameters every configuration shares, with the sweep's first filter (gamma, temperature, the
    filter and seed are set per call)."""
    from specdec.runtime import Params

    top_k, top_p = args.filters[0]
    return Params(top_k=top_k, top_p=top_p, lenience=args.lenience)


def filter_settings(args) -> dict:
    """`filters` (every one swept), `lenience`, and `top_k`/`top_p`: the filter when there is one, else None."""
    single = args.filters[0] if len(args.filters) == 1 else (None, None)
    return {"filters": [{"top_k": k, "top_p": p} for k, p in args.filters], "top_k": single[0],
            "top_p": single[1], "lenience": args.lenience}


def needs_torch(command: str) -> None:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        raise SpecdecError(f"{command} builds and exports PyTorch models: torch and transformers are not installed",
                           'pip install -e ".[bench]"') from None


# -- running -------------------------------------------------------------------------------------------------------

def load(engine, provider, threads, graph_capture: bool = False):
    from specdec.runtime import SpeculativeDecoder

    return SpeculativeDecoder.load(engine, provider=provider, threads=threads, graph_capture=graph_capture)


def check_gammas(args, dec) -> None:
    too_big = [g for g in args.gamma if g > dec.gamma_max]
    if too_big:
        print(f"note: gamma {', '.join(map(str, too_big))} > the export's gamma_max {dec.gamma_max}: skipped",
              file=sys.stderr)
        args.gamma = [g for g in args.gamma if g <= dec.gamma_max]


def engine_info(dec) -> dict:
    m = dec.manifest
    return {"path": str(m.root), "dtype": m.dtype, "gamma_max": m.gamma_max, "max_length": m.max_length,
            "vocab_size": m.vocab_size, "target": {"source": m.models["target"].source, **m.models["target"].arch},
            "draft": {"source": m.models["draft"].source, **m.models["draft"].arch}}


def begin(title: str, provider: str, threads: int) -> dict:
    """The machine described; the command's first line and the machine line printed, with a warning (recorded in
    the JSON as under_load) when other work competes for the CPU."""
    mach = machine.describe(provider, threads)
    print(title)
    print(f"machine: {machine.one_line(mach)}")
    warning = machine.busy_warning(mach)
    if warning:
        print(warning)
        mach["under_load"] = True
    return mach


def bar_factory(disabled: bool):
    from tqdm import tqdm

    def make(total, desc):
        # stderr, so stdout stays the tables; disable=None hides it when stderr is not a terminal
        return tqdm(total=total, desc=desc, unit="run", dynamic_ncols=True, leave=False,
                    disable=True if disabled else None, file=sys.stderr)
    return make


@contextlib.contextmanager
def progress(args, total: int, desc: str):
    """A progress bar over `total` runs, closed however the runs end."""
    bar = bar_factory(args.no_progress)(total, desc)
    try:
        yield bar
    finally:
        bar.close()


def probe(dec, prompts, args, temperatures, max_gamma: int, source=None):
    """The cost probe: fused runs at temperature 0 with the sweep's first filter, the head alone at temperature 0
    and every temperature of the sweep (1.0 too when the sweep has no positive one), with every filter of the
    sweep, for G = 0 .. the largest gamma. `source`: what the encoders read (default the first prompt's: its ids,
    or an audio prompt's samples, at most the encoder's window of them)."""
    from . import costs

    head_temps = sorted({float(t) for t in temperatures if t > 0} or {1.0})
    top_k, top_p = args.filters[0]
    if source is None:
        source = prompts[0].source
        speech = dec.manifest.speech
        if speech is not None:                  # a clip longer than the window: generate decodes it window by window
            source = source[:int(speech["n_samples"])]
    return costs.probe(dec, source, args.past, repeats=args.probe_repeats, temperature=0.0,
                       top_k=top_k, top_p=top_p, lenience=args.lenience, threads=args.threads,
                       head_temperatures=head_temps, head_guesses=range(max_gamma + 1), sweep_filters=args.filters)


def time_peers(args, dec, prompts, gamma: int, default: bool) -> dict:
    """Time the peers (peers.py) beside specdec's speculative path (the draft at `gamma`, or with `default`
    specdec's default); report.peers_parts shows them."""
    from .peers import OPTIMUM_TIMEOUT_S
    from .peers import run_peers

    return run_peers(dec, prompts, args.max_new_tokens, gamma, args.peer_repeat or args.repeat, Path(args.work_dir),
                     args.threads, args.target_checkpoint, args.draft_checkpoint, bar_factory(args.no_progress),
                     log=lambda m: print(m, file=sys.stderr), peer_python=args.peer_python,
                     peer_timeout=args.peer_timeout or OPTIMUM_TIMEOUT_S, default=default)


def report(out: dict, args, sections) -> None:
    """The end of a measuring command: the load average at the end into the report's machine, `sections(out)` (the
    report's parts, tables.render) printed, then written as JSON (--json) and Markdown (--markdown: the machine line,
    then the same parts)."""
    from .report import markdown, write_json
    from .tables import render

    out["machine"]["load_average_at_end"] = machine.load_average()
    parts = sections(out)
    print()
    print(render(parts))
    if args.json:
        print(f"\nJSON: {write_json(out, args.json)}")
    if getattr(args, "markdown", None):
        path = Path(args.markdown)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(markdown(out, render(parts, markdown=True)))
        print(f"Markdown: {path}")
