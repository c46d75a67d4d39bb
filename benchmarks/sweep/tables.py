"""The tables of `specdec-bench sweep` and `shapes` (a sweep at temperature 0 on real-shape models), and the cost
probe's and the peers' tables that other commands print too; each in both renderings (tables.py)."""

from __future__ import annotations

from .sweep import filter_label
from .sweep_summary import row_filter
from .tables import Column, fmt, lines, same, table

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


def _ms_spread(r: dict) -> str:
    ms = r["ms_per_token"]
    return f"{ms['median']:.3f} ({ms['min']:.3f}-{ms['max']:.3f})"


def _half_range(spread: dict, spec: str = ".2f") -> str:
    return fmt((spread["max"] - spread["min"]) / 2, spec)


_SETTING = (same("T", lambda r: fmt(r["temperature"], "g")),
            same("filter", lambda r: filter_label(row_filter(r))),
            Column("gamma", "γ", lambda r: str(r["gamma"])))

SWEEP = _SETTING + (
    Column("ms/tok", "ms/token (min-max)", lambda r: fmt(r["ms_per_token"]["median"]), _ms_spread),
    Column("+-", None, lambda r: _half_range(r["ms_per_token"])),
    Column("tok/s", "tokens/s", lambda r: fmt(r["tokens_per_s"], ".1f"), lambda r: fmt(r["tokens_per_s"], ".0f")),
    Column("acc.rate", "accepted/proposed", lambda r: fmt(r.get("acceptance_rate"))),
    Column("alpha", "α̂", lambda r: fmt(r["alpha"])),
    Column("tok/call", "tokens/call", lambda r: fmt(r["tokens_per_target_call"])),
    Column("ORT/iter", "ORT runs/iter", lambda r: fmt(r["ort_runs_per_iteration"])),
    same("c", lambda r: fmt(r.get("c"), ".3f")),
    Column("verify_x", "verify ×", lambda r: fmt(r.get("verify_ratio"))),
    Column("host/iter", "host ms/iter", lambda r: fmt(r["host_ms_per_iteration"], ".3f") + " ms",
           lambda r: fmt(r["host_ms_per_iteration"], ".3f")),
    Column("samp+host/tok", "samp+host ms/tok (est.)",
           lambda r: fmt(r.get("sampling_host_ms_per_token"), ".3f") + " ms",
           lambda r: fmt(r.get("sampling_host_ms_per_token"), ".3f")),
    same("speedup", lambda r: fmt(r.get("speedup", {}).get("median"))),
    Column("thm3.8", "Thm 3.8", lambda r: fmt(r.get("predicted_speedup"))),
    Column("ratio", "measured/Thm", lambda r: fmt(r.get("measured_over_predicted"))),
    Column("w/costs", "w/ costs", lambda r: fmt(r.get("predicted_with_costs"))),
    Column("best_g", "best γ", lambda r: fmt(r.get("best_gamma"), "d")))


def _part(name: str):
    return lambda r: fmt(r["ms_per_token_by_part"][name], ".3f")


# where the time goes, ms per generated token: encoders, draft runs, target runs, host (and, estimated, the
# sampling heads' share of the draft and target runs)
TIME = _SETTING + (
    same("encoders", _part("encoder")), same("draft runs", _part("draft")), same("target runs", _part("target")),
    same("host", _part("host")),
    Column("total", None, lambda r: fmt(sum(r["ms_per_token_by_part"].values()), ".3f")),
    same("host %", lambda r: fmt(100 * r["host_fraction"], ".1f")),
    same("heads in runs (est.)", lambda r: fmt(r.get("head_ms_per_token_estimated"), ".3f")))


def sweep_lines(rows: list[dict], markdown: bool = False) -> tuple[list[str], list[list[str]]]:
    return lines(SWEEP, rows, markdown)


def time_lines(rows: list[dict], markdown: bool = False) -> tuple[list[str], list[list[str]]]:
    return lines(TIME, rows, markdown)


def summary_lines(rows: list[dict], best: dict) -> tuple[list[str], list[list[str]]]:
    """The acceptance summary, one line per (temperature, filter): ms/token at gamma = 0 and at the best measured
    gamma, samp+host ms/token and ORT runs per iteration at both, measured / Theorem 3.8."""
    headers = ["T", "filter", "ms/tok g=0", "best g", "ms/tok best g", "speedup", "measured/thm3.8",
               "samp+host/tok g=0", "samp+host/tok best g", "ORT runs/iter g=0", "ORT runs/iter best g"]
    out = []
    for b in best.values():
        base = next((r for r in rows if r["temperature"] == b["temperature"] and row_filter(r) == row_filter(b)
                     and r["gamma"] == 0), {})
        out.append([fmt(b["temperature"], "g"), filter_text(base), fmt(b["baseline_ms_per_token"], ".3f"),
                    str(b["measured_best_gamma"]), fmt(b["best_ms_per_token"], ".3f"), fmt(b["measured_speedup"]),
                    fmt(b["measured_over_predicted"]), fmt(b.get("baseline_sampling_host_ms_per_token"), ".3f"),
                    fmt(b.get("best_sampling_host_ms_per_token"), ".3f"),
                    fmt(b["baseline_ort_runs_per_iteration"]), fmt(b["best_ort_runs_per_iteration"])])
    return headers, out


def filter_cost_lines(entries: list[dict]) -> tuple[list[str], list[list[str]]]:
    """What each filter costs per generated token (JSON `filter_cost`), one line per (temperature, filter, gamma):
    its ms/token, plain sampling's at the same temperature and gamma, and the median and min-max of the per-repeat
    ratios."""
    headers = ["T", "filter", "gamma", "ms/tok", "ms/tok none", "x none", "x none min-max"]
    out = []
    for e in entries:
        ratio = e["ratio_to_plain"]
        out.append([fmt(e["temperature"], "g"), filter_label(row_filter(e)), str(e["gamma"]),
                    fmt(e["ms_per_token"], ".3f"), fmt(e["plain_ms_per_token"], ".3f"), fmt(ratio["median"], ".3f"),
                    f"{ratio['min']:.3f}-{ratio['max']:.3f}"])
    return headers, out


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


def generation_lines(runs: dict, markdown: bool = False) -> tuple[list[str], list[list[str]]]:
    """`shapes`' real loop per gamma: where an iteration's time goes."""
    columns = (Column("gamma", "γ", lambda gr: gr[0]),
               same("iteration ms", lambda gr: f"{gr[1]['iteration_ms']:.2f}"),
               same("target runs ms", lambda gr: f"{gr[1]['target_ms_per_iteration']:.2f}"),
               same("draft runs ms", lambda gr: f"{gr[1]['draft_ms_per_iteration']:.2f}"),
               same("host ms", lambda gr: f"{gr[1]['host_ms_per_iteration']:.3f}"),
               same("host %", lambda gr: f"{100 * gr[1]['host_fraction_of_iteration']:.2f}"),
               Column("ORT/iter", "ORT runs/iter", lambda gr: fmt(gr[1]["ort_runs_per_iteration"])),
               Column("samp+host ms/tok", "samp+host ms/tok (est.)",
                      lambda gr: fmt(gr[1].get("sampling_host_ms_per_token"), ".3f")))
    return lines(columns, list(runs.items()), markdown)


def prediction_lines(analysis: dict, markdown: bool = False) -> tuple[list[str], list[list[str]]]:
    """`shapes`' Theorem 3.8 / with-costs speedup per paper alpha and gamma, and the best gammas."""
    gs = sorted({g for curve in analysis["predictions"].values() for g in curve}, key=int)
    sep = " / " if markdown else "/"
    gamma = "γ" if markdown else "g"
    headers = (["α" if markdown else "alpha"] + [f"{gamma}={g}" for g in gs]
               + (["best γ (Thm)", "best γ (w/ costs)"] if markdown else ["best g", "best g w/costs"]))
    out = [[a] + [f"{curve[g]['theorem_3_8']:.2f}{sep}{curve[g]['with_costs']:.2f}" for g in gs]
           + [str(analysis["best"][a]["theorem_best_gamma"]), str(analysis["best"][a]["with_costs_best_gamma"])]
           for a, curve in analysis["predictions"].items()]
    return headers, out


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
