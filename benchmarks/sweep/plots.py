"""The plots (`--plot`): measured vs predicted speedup over gamma (`sweep`), and the prediction over gamma for the
paper's alpha values (`shapes`)."""

from __future__ import annotations

from pathlib import Path

from ..common.runs import filter_label
from .summary import row_filter


def plot(rows: list[dict], path: str | Path, title: str) -> Path:
    """Measured speedup (median, min-max bars) and the Theorem 3.8 prediction over gamma, one panel per
    (T, filter)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys((r["temperature"], row_filter(r)) for r in rows))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
    for ax, (t, f) in zip(axes[0], panels):
        rs = sorted((r for r in rows if r["temperature"] == t and row_filter(r) == f and "speedup" in r),
                    key=lambda r: r["gamma"])
        gs = [r["gamma"] for r in rs]
        med = [r["speedup"]["median"] for r in rs]
        lo = [m - r["speedup"]["min"] for m, r in zip(med, rs)]
        hi = [r["speedup"]["max"] - m for m, r in zip(med, rs)]
        ax.errorbar(gs, med, yerr=[lo, hi], fmt="o-", capsize=3, label="measured")
        pred = [(r["gamma"], r["predicted_speedup"]) for r in rs if r.get("predicted_speedup") is not None]
        ax.plot([g for g, _ in pred], [s for _, s in pred], "s--", label="Theorem 3.8 (measured alpha, c)")
        cost = [(r["gamma"], r["predicted_with_costs"]) for r in rs if r.get("predicted_with_costs") is not None]
        ax.plot([g for g, _ in cost], [s for _, s in cost], "^:", label="with measured costs (target run, host)")
        ax.axhline(1.0, color="grey", lw=0.8)
        alphas = [r["alpha"] for r in rs if r.get("alpha") is not None]
        label = (f"T = {t:g}, filter {filter_label(f)}" + (f" (alpha-hat {min(alphas):.2f}-{max(alphas):.2f})"
                                                            if alphas else ""))
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
