"""The report: the JSON (`--json`) with its schema name, the Markdown (`--markdown`: the machine line, then the
command's parts), and the parts several commands show (the cost probe, the sampling filters, the peers)."""

from __future__ import annotations

import json
from pathlib import Path

from .runs import filter_label
from .tables import Table, fmt

SCHEMA = "specdec-bench/1"


def write_json(report: dict, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema": SCHEMA, **report}, indent=2, default=_jsonable) + "\n")
    return path


def _jsonable(value):
    try:
        import numpy as np

        if isinstance(value, np.generic):
            return value.item()
    except ImportError:
        pass
    return str(value)


SAMP_HOST_NOTE = ("samp+host: host ms per generated token (measured) + the sampling heads' in-graph cost per token "
                  "(ESTIMATED: head-alone timings of the cost probe x draft and target runs)")


def filter_text(r: dict) -> str:
    parts = []
    if r.get("top_k"):
        parts.append(f"top_k {r['top_k']}")
    if r.get("top_p") is not None and r["top_p"] < 1.0:
        parts.append(f"top_p {r['top_p']:g}")
    if r.get("lenience") is not None and r["lenience"] < 1.0:
        parts.append(f"lenience {r['lenience']:g}")
    return ", ".join(parts) or "plain"


def sweep_filters_text(settings: dict) -> str:
    """The sweep's filters and lenience (JSON `settings`): `every configuration: top_k 5, top_p 0.9` for one
    filter, `filters (top_k:top_p) none, 50:0.9, interleaved; every configuration: lenience 1` for several."""
    filters = settings["filters"]
    if len(filters) == 1:
        return f"every configuration: {filter_text({**filters[0], 'lenience': settings['lenience']})}"
    labels = ", ".join(filter_label((f["top_k"], f["top_p"])) for f in filters)
    return f"filters (top_k:top_p) {labels}, interleaved; every configuration: lenience {settings['lenience']:g}"


def _head_grid(probe: dict) -> tuple[list[str], list[list[str]]]:
    """The head-alone timings as a grid: one line per (temperature, filter), draft G=0 then target G=0..max."""
    entries = probe.get("head_ms") or []
    guesses = sorted({e["guesses"] for e in entries if e["role"] == "target"})
    settings = list(dict.fromkeys((e["temperature"], e["top_k"], e["top_p"]) for e in entries))
    index = {(e["role"], e["guesses"], e["temperature"], e["top_k"], e["top_p"]): e["ms"] for e in entries}
    headers = ["T", "filter", "draft G=0"] + [f"target G={g}" for g in guesses]
    out = []
    for t, k, p in settings:
        out.append([fmt(t, "g"), filter_text({"top_k": k, "top_p": p}), fmt(index.get(("draft", 0, t, k, p)), ".3f")]
                   + [fmt(index.get(("target", g, t, k, p)), ".3f") for g in guesses])
    return headers, out


def source_text(probe: dict) -> str:
    """What the probe's encoders read: `48 tokens`, or a Whisper export's `30.0 s of audio`."""
    seconds = probe.get("source_seconds")
    return f"{seconds:.1f} s of audio" if seconds is not None else f"{probe['source_length']} tokens"


def probe_parts(probe: dict) -> list:
    """The cost probe: the fused runs' costs, the target run over k tokens, the sampling head alone."""
    s = probe["settings"]
    verify = [[str(k), fmt(ms, ".3f"), fmt(probe["verify_ratio"].get(k))] for k, ms in probe["verify_ms"].items()]
    out = [Table(f"per-call costs at past length {probe['past_length']} (source {source_text(probe)}, median of "
                 f"{probe['repeats']}; fused runs, decoder + sampling head, at T={s['temperature']:g}, "
                 f"{filter_text(s)}): target step {fmt(probe['target_step_ms'], '.3f')} ms, draft step "
                 f"{fmt(probe['draft_step_ms'], '.3f')} ms, c = {fmt(probe['c'], '.3f')} (without the heads, "
                 f"estimated: {fmt(probe.get('c_without_head'), '.3f')})",
                 ("tokens k", "target run ms", "x one-token step"), verify)]
    if probe.get("head_ms"):
        return out + [Table(f"sampling head alone, ms (G guesses; vocab {probe['head_vocab']}; an estimate of its "
                            f"cost inside a fused run)", *_head_grid(probe))]
    return out + [f"sampling head: {probe.get('head_note')}"]


def peers_parts(report: dict, what: str = "") -> list:
    """The peers' table, one line per peer: ms/token, tokens/s, latency ratios, tokens equal to specdec's; a peer
    that did not run gives its status as the note (none when the run timed no peers)."""
    pe = report.get("peers")
    if not pe:
        return []
    first = next(iter(pe["engines"]))
    rows = []
    for name, p in pe["engines"].items():
        if p.get("status") != "ok":
            rows.append([name] + ["-"] * 6 + [p.get("status", "")])
            continue
        a = p.get("agreement")
        rows.append([name, fmt(p["ms_per_token"]["median"], ".3f"), fmt(p["tokens_per_s"], ".0f"),
                     fmt(p["ratio_to_specdec_speculative"]), fmt(p.get("ratio_to_own_autoregressive")),
                     fmt(p["ratio_to_specdec_gamma0"]), f"{a['agree']}/{a['prompts']}" if a else "-",
                     p.get("note", "")])
    return [Table(f"peers (greedy, same checkpoints and prompts, max_new_tokens {pe['max_new_tokens']}, "
                  f"{pe['repeats']} repeats{what}; assistants gamma {pe['gamma']}; latency ÷ X > 1: X is faster; "
                  f"same tokens: prompts whose greedy output equals specdec's)",
                  ("engine", "ms/token", "tokens/s", f"latency ÷ {first}", "latency ÷ own autoregressive",
                   "latency ÷ specdec γ=0", "same tokens", "note"), rows)]


def markdown(report: dict, parts: str) -> str:
    """The machine line, then the command's parts (rendered as Markdown)."""
    m = report["machine"]
    head = (f"Machine: {m['cpu_model']}, {m['cpu_cores']} cores, {m.get('memory_gib')} GiB, provider "
            f"{m['provider']}, onnxruntime {m['onnxruntime']}"
            + (f", SPECDEC_THREADS={m['specdec_threads']}" if m.get("specdec_threads") else "")
            + f", {m['date_utc']}; load average "
            f"{m.get('load_average_at_start')} at start, {m.get('load_average_at_end')} at end; CPU "
            f"{100 * (m.get('cpu_busy_before_run') or 0):.0f}% busy just before the run"
            + (" (**taken under load**: other processes were using the CPU)." if m.get("under_load") else "."))
    return f"{head}\n\n{parts}\n"
