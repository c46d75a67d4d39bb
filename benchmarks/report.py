"""Plain-text tables for stdout, the JSON report and the measured-vs-predicted plot."""

from __future__ import annotations

import json
from pathlib import Path

SCHEMA = "specdec-bench/1"


def _f(value, fmt: str = ".2f", none: str = "-") -> str:
    return none if value is None else format(value, fmt)


def table(headers: list[str], lines: list[list[str]]) -> str:
    widths = [max(len(h), *(len(l[i]) for l in lines)) if lines else len(h) for i, h in enumerate(headers)]
    out = ["  ".join(h.rjust(w) for h, w in zip(headers, widths)),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.rjust(w) for c, w in zip(l, widths)) for l in lines]
    return "\n".join(out)


def sweep_table(rows: list[dict]) -> str:
    headers = ["T", "gamma", "ms/tok", "+-", "tok/s", "acc.rate", "alpha", "tok/call", "c", "verify_x", "host/iter",
               "speedup", "thm3.8", "ratio", "w/costs", "best_g"]
    lines = []
    for r in rows:
        ms = r["ms_per_token"]
        lines.append([_f(r["temperature"], "g"), str(r["gamma"]), _f(ms["median"]), _f((ms["max"] - ms["min"]) / 2),
                      _f(r["tokens_per_s"], ".1f"), _f(r.get("acceptance_rate")), _f(r["alpha"]),
                      _f(r["tokens_per_target_call"]), _f(r.get("c"), ".3f"),
                      _f(r.get("verify_ratio")), _f(r["host_ms_per_iteration"], ".3f") + " ms",
                      _f(r.get("speedup", {}).get("median")), _f(r.get("predicted_speedup")),
                      _f(r.get("measured_over_predicted")), _f(r.get("predicted_with_costs")),
                      _f(r.get("best_gamma"), "d")])
    return table(headers, lines)


def time_table(rows: list[dict]) -> str:
    """Where the time goes, ms per generated token."""
    headers = ["T", "gamma", "encoders", "draft", "verify", "sampling", "host", "total", "host %"]
    lines = []
    for r in rows:
        parts = r["ms_per_token_by_part"]
        total = sum(parts.values())
        lines.append([_f(r["temperature"], "g"), str(r["gamma"])] + [_f(parts[k], ".3f") for k in
                     ("encoder", "draft", "verify", "sampling", "host")] + [_f(total, ".3f"),
                     _f(100 * r["host_fraction"], ".1f")])
    return table(headers, lines)


def probe_table(probe: dict) -> str:
    headers = ["tokens k", "verify ms", "x one-token step"]
    lines = [[k, _f(probe["verify_ms"][k], ".3f"), _f(probe["verify_ratio"][k])] for k in probe["verify_ms"]]
    head = (f"per-call costs at past length {probe['past_length']} (source {probe['source_length']} tokens, "
            f"median of {probe['repeats']}): target step {probe['target_step_ms']:.3f} ms, draft step "
            f"{probe['draft_step_ms']:.3f} ms, c = {probe['c']:.3f} (with the sampler run: "
            f"{probe['c_with_sampler']:.3f}), sampler {probe['sample_ms']:.3f} ms")
    return head + "\n" + table(headers, lines)


def peers_table(peers: dict) -> str:
    headers = ["engine", "ms/tok", "tok/s", "vs specdec spec", "vs own AR", "vs specdec g=0", "same tokens", "note"]
    lines = []
    for name, p in peers["engines"].items():
        if p.get("status") != "ok":
            lines.append([name, "-", "-", "-", "-", "-", "-", p.get("status", "")])
            continue
        agree = p.get("agreement")
        lines.append([name, _f(p["ms_per_token"]["median"]), _f(p["tokens_per_s"], ".1f"),
                      _f(p["ratio_to_specdec_speculative"]), _f(p.get("ratio_to_own_autoregressive")),
                      _f(p["ratio_to_specdec_gamma0"]),
                      f"{agree['agree']}/{agree['prompts']}" if agree else "-", p.get("note", "")])
    return table(headers, lines)


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


def plot(rows: list[dict], path: str | Path, title: str) -> Path:
    """Measured speedup (median, min-max bars) and the Theorem 3.8 prediction over gamma, one panel per T."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    temps = sorted({r["temperature"] for r in rows})
    fig, axes = plt.subplots(1, len(temps), figsize=(5.2 * len(temps), 4.2), squeeze=False)
    for ax, t in zip(axes[0], temps):
        rs = sorted((r for r in rows if r["temperature"] == t and "speedup" in r), key=lambda r: r["gamma"])
        gs = [r["gamma"] for r in rs]
        med = [r["speedup"]["median"] for r in rs]
        lo = [m - r["speedup"]["min"] for m, r in zip(med, rs)]
        hi = [r["speedup"]["max"] - m for m, r in zip(med, rs)]
        ax.errorbar(gs, med, yerr=[lo, hi], fmt="o-", capsize=3, label="measured")
        pred = [(r["gamma"], r["predicted_speedup"]) for r in rs if r.get("predicted_speedup") is not None]
        ax.plot([g for g, _ in pred], [s for _, s in pred], "s--", label="Theorem 3.8 (measured alpha, c)")
        cost = [(r["gamma"], r["predicted_with_costs"]) for r in rs if r.get("predicted_with_costs") is not None]
        ax.plot([g for g, _ in cost], [s for _, s in cost], "^:", label="with measured verify cost + overhead")
        ax.axhline(1.0, color="grey", lw=0.8)
        alphas = [r["alpha"] for r in rs if r.get("alpha") is not None]
        label = f"T = {t:g}" + (f" (alpha-hat {min(alphas):.2f}-{max(alphas):.2f})" if alphas else "")
        ax.set_title(label)
        ax.set_xlabel("gamma (draft tokens per target call)")
        ax.set_ylabel("speedup over gamma = 0")
        ax.set_xticks(gs)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    return _save(fig, path)


def _save(fig, path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_shapes(result: dict, path: str | Path, title: str) -> Path:
    """Real shapes: Theorem 3.8's speedup over gamma for the paper's alpha values, with the measured c (and the
    prediction with the measured verify cost and overhead)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for i, (alpha, curve) in enumerate(result["predictions"].items()):
        gs = [int(g) for g in curve]
        ax.plot(gs, [curve[str(g)]["theorem_3_8"] for g in gs], "o-", color=f"C{i}", label=f"alpha {alpha}: Thm 3.8")
        ax.plot(gs, [curve[str(g)]["with_costs"] for g in gs], "x:", color=f"C{i}",
                label=f"alpha {alpha}: with measured verify cost")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("gamma")
    ax.set_ylabel("predicted speedup")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(title, fontsize=9)
    return _save(fig, path)


def _md(headers: list[str], lines: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---:" for _ in headers) + "|"]
    out += ["| " + " | ".join(l) + " |" for l in lines]
    return "\n".join(out)


def markdown(report: dict) -> str:
    """The report's tables as Markdown (what benchmarks/README.md quotes)."""
    m = report["machine"]
    head = (f"Machine: {m['cpu_model']}, {m['cpu_cores']} cores, {m.get('memory_gib')} GiB, provider "
            f"{m['provider']}, onnxruntime {m['onnxruntime']}, {m['date_utc']}; load average "
            f"{m.get('load_average_at_start')} at start, {m.get('load_average_at_end')} at end; CPU "
            f"{100 * (m.get('cpu_busy_before_run') or 0):.0f}% busy just before the run"
            + (" (**taken under load**: other processes were using the CPU)." if m.get("under_load") else "."))
    parts = [head]
    if report["mode"] == "engine":
        s = report["settings"]
        parts.append(f"{s['prompts']} prompts ({s['prompts_origin']}), max_new_tokens {s['max_new_tokens']}, "
                     f"{s['repeats']} repeats.")
        lines = []
        for r in report["results"]:
            ms = r["ms_per_token"]
            lines.append([_f(r["temperature"], "g"), str(r["gamma"]),
                          f"{ms['median']:.3f} ({ms['min']:.3f}-{ms['max']:.3f})", _f(r["tokens_per_s"], ".0f"),
                          _f(r.get("acceptance_rate")), _f(r["alpha"]), _f(r["tokens_per_target_call"]), _f(r.get("c"), ".3f"),
                          _f(r.get("verify_ratio")), _f(r["host_ms_per_iteration"], ".3f"),
                          _f(r.get("speedup", {}).get("median")), _f(r.get("predicted_speedup")),
                          _f(r.get("measured_over_predicted")), _f(r.get("predicted_with_costs")),
                          _f(r.get("best_gamma"), "d")])
        parts.append(_md(["T", "γ", "ms/token (min-max)", "tokens/s", "accepted/proposed", "α̂", "tokens/call", "c", "verify ×",
                          "host ms/iter", "speedup", "Thm 3.8", "measured/Thm", "w/ costs", "best γ"], lines))
        lines = []
        for r in report["results"]:
            p = r["ms_per_token_by_part"]
            lines.append([_f(r["temperature"], "g"), str(r["gamma"])] +
                         [_f(p[k], ".3f") for k in ("encoder", "draft", "verify", "sampling", "host")] +
                         [_f(100 * r["host_fraction"], ".1f")])
        parts.append("Where the time goes, ms per generated token:\n\n" +
                     _md(["T", "γ", "encoders", "draft", "verify", "sampling", "host", "host %"], lines))
        probe = report["cost_probe"]
        parts.append(f"Per-call costs at past length {probe['past_length']}: target step "
                     f"{probe['target_step_ms']:.3f} ms, draft step {probe['draft_step_ms']:.3f} ms, c = "
                     f"{probe['c']:.3f}; verify ratio " + ", ".join(f"{k} tokens {v:.2f}×" for k, v in
                                                                    probe["verify_ratio"].items()) + ".")
        if report.get("peers"):
            pe = report["peers"]
            lines = []
            for name, p in pe["engines"].items():
                if p.get("status") != "ok":
                    lines.append([name, "-", "-", "-", "-", "-", p.get("status", "")])
                    continue
                a = p["agreement"]
                lines.append([name, _f(p["ms_per_token"]["median"], ".3f"), _f(p["tokens_per_s"], ".0f"),
                              _f(p["ratio_to_specdec_speculative"]), _f(p.get("ratio_to_own_autoregressive")),
                              f"{a['agree']}/{a['prompts']}", p.get("note", "")])
            parts.append(f"Peers (greedy, γ = {pe['gamma']}, {pe['repeats']} repeats):\n\n" +
                         _md(["engine", "ms/token", "tokens/s", "latency ÷ specdec speculative",
                              "latency ÷ own autoregressive", "same tokens", "note"], lines))
    else:
        probe, acc = report["cost_probe"], report["acceptance"]
        parts.append(f"Per-call costs at past length {probe['past_length']} (source {probe['source_length']} "
                     f"tokens): target step {probe['target_step_ms']:.2f} ms, draft step "
                     f"{probe['draft_step_ms']:.2f} ms, c = {probe['c']:.3f}, sampler run {probe['sample_ms']:.3f} ms.")
        parts.append(_md(["verify tokens", "ms", "× one-token step"],
                         [[k, f"{probe['verify_ms'][k]:.2f}", f"{probe['verify_ratio'][k]:.2f}"]
                          for k in probe["verify_ms"]]))
        parts.append(_md(["γ", "iteration ms", "verify ms", "draft ms", "sampling ms", "host ms", "host %"],
                         [[g, f"{r['iteration_ms']:.2f}", f"{r['verify_ms_per_iteration']:.2f}",
                           f"{r['draft_ms_per_iteration']:.2f}", f"{r['sampling_ms_per_iteration']:.3f}",
                           f"{r['host_ms_per_iteration']:.3f}", f"{100 * r['host_fraction_of_iteration']:.2f}"]
                          for g, r in report["generation"].items()]))
        gs = sorted({g for c in report["predictions"].values() for g in c}, key=int)
        parts.append("Predicted speedup, Theorem 3.8 / with the measured verify cost, samplers and host time:\n\n" +
                     _md(["α"] + [f"γ={g}" for g in gs] + ["best γ (Thm)", "best γ (w/ costs)"],
                         [[a] + [f"{c[g]['theorem_3_8']:.2f} / {c[g]['with_costs']:.2f}" for g in gs] +
                          [str(report["best"][a]["theorem_best_gamma"]), str(report["best"][a]["with_costs_best_gamma"])]
                          for a, c in report["predictions"].items()]))
        loop = acc.get("verify_5_over_step_in_loop")
        parts.append(f"Acceptance: verify of 5 tokens = {acc['verify_5_over_step']:.2f}× a one-token step"
                     + (f" ({loop:.2f}× in the real loop, γ = 4 vs γ = 0)" if loop is not None else "") + "; host "
                     f"overhead at most {100 * acc['host_fraction_worst']:.2f}% of an iteration.")
    return "\n\n".join(parts) + "\n"
