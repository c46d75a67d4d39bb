"""The plots (`--plot`): measured vs predicted speedup over gamma (`sweep`), and the prediction over gamma for the
paper's alpha values (`shapes`)."""

from __future__ import annotations

from pathlib import Path

from ..common.runs import filter_label
from .summary import row_filter


def _axes(panels: int, size: tuple):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(1, panels, figsize=size, squeeze=False)


def _save(fig, path, title: str) -> Path:
    import matplotlib.pyplot as plt

    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _finish(ax, xlabel: str, ylabel: str, fontsize: int) -> None:
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=fontsize)


def plot(rows: list[dict], path: str | Path, title: str) -> Path:
    """Measured speedup (median, min-max bars) and Theorem 3.8's over gamma, one panel per (T, filter)."""
    panels = list(dict.fromkeys((r["temperature"], row_filter(r)) for r in rows))
    fig, axes = _axes(len(panels), (5.2 * len(panels), 4.2))
    for ax, (t, f) in zip(axes[0], panels):
        rs = sorted((r for r in rows if r["temperature"] == t and row_filter(r) == f and "speedup" in r),
                    key=lambda r: r["gamma"])
        gs, med = [r["gamma"] for r in rs], [r["speedup"]["median"] for r in rs]
        ax.errorbar(gs, med, yerr=[[m - r["speedup"]["min"] for m, r in zip(med, rs)],
                                   [r["speedup"]["max"] - m for m, r in zip(med, rs)]],
                    fmt="o-", capsize=3, label="measured")
        for key, style, label in (("predicted_speedup", "s--", "Theorem 3.8 (measured alpha, c)"),
                                  ("predicted_with_costs", "^:", "with measured costs (target run, host)")):
            pts = [(r["gamma"], r[key]) for r in rs if r.get(key) is not None]
            ax.plot([g for g, _ in pts], [s for _, s in pts], style, label=label)
        alphas = [r["alpha"] for r in rs if r.get("alpha") is not None]
        ax.set_title(f"T = {t:g}, filter {filter_label(f)}"
                     + (f" (alpha-hat {min(alphas):.2f}-{max(alphas):.2f})" if alphas else ""))
        ax.set_xticks(gs)
        _finish(ax, "gamma (draft tokens per target call)", "speedup over gamma = 0", 8)
    return _save(fig, path, title)


def plot_shapes(result: dict, path: str | Path, title: str) -> Path:
    """Theorem 3.8's speedup over gamma for the paper's alpha values, with the measured c (and verify cost)."""
    fig, axes = _axes(1, (6.4, 4.4))
    ax = axes[0][0]
    for i, (alpha, curve) in enumerate(result["predictions"].items()):
        gs = [int(g) for g in curve]
        ax.plot(gs, [curve[str(g)]["theorem_3_8"] for g in gs], "o-", color=f"C{i}", label=f"alpha {alpha}: Thm 3.8")
        ax.plot(gs, [curve[str(g)]["with_costs"] for g in gs], "x:", color=f"C{i}",
                label=f"alpha {alpha}: with measured verify cost")
    _finish(ax, "gamma", "predicted speedup", 7)
    return _save(fig, path, title)
