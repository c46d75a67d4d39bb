"""The tables of `specdec-bench shapes` (both renderings) and its Markdown report."""

from __future__ import annotations

from ..common.report import head_grid_part, source_text, verify_lines
from ..common.tables import Column, fmt, lines, markdown_table, same

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


def markdown_sections(report: dict, before=(), after=()) -> list[str]:
    """The report of `shapes` in Markdown (after the machine line); a Whisper pair's encoder parts go `before` the
    per-call costs and `after` the decoder's predictions."""
    probe, acc = report["cost_probe"], report["acceptance"]
    label = f" ({report['prediction_label']})" if report.get("prediction_label") else ""
    parts = list(before) + [
        f"Per-call costs at past length {probe['past_length']} (source {source_text(probe)}; fused runs, decoder + "
        f"sampling head): target step {probe['target_step_ms']:.2f} ms, draft step {probe['draft_step_ms']:.2f} ms, "
        f"c = {probe['c']:.3f}; the head alone: {fmt(probe.get('target_step_head_ms'), '.3f')} ms for a target "
        f"step's draw, {fmt(probe.get('draft_step_head_ms'), '.3f')} ms for a draft step's (estimates).",
        markdown_table(*verify_lines(probe, markdown=True))]
    parts += head_grid_part(probe, "")
    parts.append(markdown_table(*generation_lines(report["generation"], markdown=True)))
    parts.append(f"Predicted {'decoder ' if label else ''}speedup{label}, Theorem 3.8 / with the measured costs "
                 "(fused target pass of γ+1 tokens, host time; sampling is inside the runs):\n\n" +
                 markdown_table(*prediction_lines(report, markdown=True)))
    parts += after
    loop = acc.get("verify_5_over_step_in_loop")
    v5 = acc.get("verify_5_over_step")
    parts.append("Acceptance: verify of 5 tokens = " + (f"{v5:.2f}× a one-token step" if v5 is not None
                                                          else "not measured (gamma_max < 4)")
                 + (f" ({loop:.2f}× in the real loop, γ = 4 vs γ = 0)" if loop is not None else "") + "; host "
                 f"overhead at most {100 * acc['host_fraction_worst']:.2f}% of an iteration.")
    return parts
