"""The report: the JSON (`--json`) with its schema name, the Markdown (`--markdown`: the machine line, then the
sections the command renders), and the parts several commands show (the cost probe, the sampling filters, the
peers), each in both renderings (tables.py)."""

from __future__ import annotations

import json
from pathlib import Path

from .runs import filter_label
from .tables import Column, fmt, lines, markdown_table, same, table

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


def head_grid(probe: dict) -> tuple[list[str], list[list[str]]]:
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


def verify_lines(probe: dict, markdown: bool = False) -> tuple[list[str], list[list[str]]]:
    """The probe's target run over k tokens: ms, and over its one-token step."""
    columns = (Column("tokens k", "verify tokens", lambda k: k),
               Column("target run ms", "ms", lambda k: fmt(probe["verify_ms"][k], ".3f"),
                      lambda k: fmt(probe["verify_ms"][k])),
               Column("x one-token step", "× one-token step", lambda k: fmt(probe["verify_ratio"].get(k))))
    return lines(columns, list(probe["verify_ms"]), markdown)


def source_text(probe: dict) -> str:
    """What the probe's encoders read: `48 tokens`, or a Whisper export's `30.0 s of audio`."""
    seconds = probe.get("source_seconds")
    return f"{seconds:.1f} s of audio" if seconds is not None else f"{probe['source_length']} tokens"


def probe_text(probe: dict) -> str:
    s = probe["settings"]
    head = (f"per-call costs at past length {probe['past_length']} (source {source_text(probe)}, "
            f"median of {probe['repeats']}; fused runs, decoder + sampling head, at T={s['temperature']:g}, "
            f"{filter_text(s)}): target step {fmt(probe['target_step_ms'], '.3f')} ms, draft step "
            f"{fmt(probe['draft_step_ms'], '.3f')} ms, c = {fmt(probe['c'], '.3f')} (without the heads, estimated: "
            f"{fmt(probe.get('c_without_head'), '.3f')})")
    out = head + "\n" + table(*verify_lines(probe))
    if probe.get("head_ms"):
        out += (f"\n\nsampling head alone, ms (G guesses; vocab {probe['head_vocab']}; an estimate of its cost "
                f"inside a fused run):\n" + table(*head_grid(probe)))
    else:
        out += f"\nsampling head: {probe.get('head_note')}"
    return out


def peers_lines(peers: dict, markdown: bool = False) -> tuple[list[str], list[list[str]]]:
    """One line per peer: ms/token, tokens/s, latency ratios, tokens equal to specdec's; a peer that did not run
    gives its status as the note."""
    first = next(iter(peers["engines"]))

    def ok(cell):
        return lambda e: cell(e[1]) if e[1].get("status") == "ok" else "-"

    def agreement(p):
        a = p.get("agreement")
        return f"{a['agree']}/{a['prompts']}" if a else "-"

    columns = (same("engine", lambda e: e[0]),
               Column("ms/tok", "ms/token", ok(lambda p: fmt(p["ms_per_token"]["median"])),
                      ok(lambda p: fmt(p["ms_per_token"]["median"], ".3f"))),
               Column("tok/s", "tokens/s", ok(lambda p: fmt(p["tokens_per_s"], ".1f")),
                      ok(lambda p: fmt(p["tokens_per_s"], ".0f"))),
               Column("vs specdec spec", f"latency ÷ {first}", ok(lambda p: fmt(p["ratio_to_specdec_speculative"]))),
               Column("vs own AR", "latency ÷ own autoregressive",
                      ok(lambda p: fmt(p.get("ratio_to_own_autoregressive")))),
               Column("vs specdec g=0", "latency ÷ specdec γ=0", ok(lambda p: fmt(p["ratio_to_specdec_gamma0"]))),
               same("same tokens", ok(agreement)),
               same("note", lambda e: e[1].get("note" if e[1].get("status") == "ok" else "status", "")))
    return lines(columns, list(peers["engines"].items()), markdown)


def markdown(report: dict, sections) -> str:
    """The machine line, then `sections(report)` (a list of Markdown paragraphs and tables)."""
    m = report["machine"]
    head = (f"Machine: {m['cpu_model']}, {m['cpu_cores']} cores, {m.get('memory_gib')} GiB, provider "
            f"{m['provider']}, onnxruntime {m['onnxruntime']}"
            + (f", SPECDEC_THREADS={m['specdec_threads']}" if m.get("specdec_threads") else "")
            + f", {m['date_utc']}; load average "
            f"{m.get('load_average_at_start')} at start, {m.get('load_average_at_end')} at end; CPU "
            f"{100 * (m.get('cpu_busy_before_run') or 0):.0f}% busy just before the run"
            + (" (**taken under load**: other processes were using the CPU)." if m.get("under_load") else "."))
    return "\n\n".join([head] + sections(report)) + "\n"


def verify_ratios_text(probe: dict) -> str:
    return ", ".join(f"{k} tokens {v:.2f}×" for k, v in probe["verify_ratio"].items())


def head_grid_part(probe: dict, what: str) -> list[str]:
    """The head-alone timings as a Markdown paragraph (none without them)."""
    if not probe.get("head_ms"):
        return []
    return [f"Sampling head alone, ms (G guesses, vocab {probe['head_vocab']}{what}):\n\n"
            + markdown_table(*head_grid(probe))]


def peers_part(report: dict) -> list[str]:
    """The peers' table as a Markdown paragraph (none when the run timed no peers)."""
    pe = report.get("peers")
    if not pe:
        return []
    return [f"Peers (greedy, every task's prompts, {pe['repeats']} repeats; assistants γ = {pe['gamma']}; "
            f"latency ÷ X > 1: X is faster):\n\n" + markdown_table(*peers_lines(pe, markdown=True))]
