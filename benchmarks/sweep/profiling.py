"""Where the host time goes: cProfile over real generate calls, listing the Python functions by own time.

ONNX Runtime's `run_with_iobinding` is where the graphs execute (that time is measured separately as encoder,
draft and target runs; the sampling heads run inside the draft and target runs); everything else listed is host
work (Stats.host_s): binding, buffer writes and reads, reading the verdict, the loop itself.
"""

from __future__ import annotations

import cProfile
import io
import pstats
from pathlib import Path

# the graphs' execution; cProfile books the C++ run under the builtin called just before it in the wrapper
# (onnxruntime >= 1.2x: is_webgpu_graph_capture_enabled, 0.1 us when timed on its own), so both are left out
ORT_RUN = ("run_with_iobinding", "is_webgpu_graph_capture_enabled")


def profile_host(dec, prompts, gamma: int, max_new_tokens: int, out_path: str | Path | None = None,
                 base=None) -> dict:
    """`base`: the sweep's shared request parameters (a specdec.runtime.Params: top_k, top_p, lenience)."""
    def generate(ids):
        return dec.generate(input_ids=ids, params=base, max_new_tokens=max_new_tokens, draft="draft", gamma=gamma,
                            temperature=0.0)

    for p in prompts[:1]:                     # warm
        generate(p.ids)
    prof = cProfile.Profile()
    iterations, host_s, ort_runs = 0, 0.0, 0
    prof.enable()
    for p in prompts:
        res = generate(p.ids)
        iterations += res.stats.target_calls
        host_s += res.stats.host_s
        ort_runs += res.stats.ort_runs
    prof.disable()
    stats = pstats.Stats(prof)
    rows = []
    for (file, line, name), (cc, nc, tt, ct, _) in stats.stats.items():
        if any(k in name for k in ORT_RUN):
            continue
        where = f"{Path(file).name}:{line}({name})" if file != "~" else name
        rows.append({"function": where, "calls_per_iteration": nc / max(iterations, 1),
                     "own_ms_per_iteration": 1000.0 * tt / max(iterations, 1)})
    rows.sort(key=lambda r: -r["own_ms_per_iteration"])
    if out_path:
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(40)
        Path(out_path).parent.mkdir(parents=True, exist_ok=True)
        Path(out_path).write_text(text.getvalue())
    return {"gamma": gamma, "iterations": iterations,
            "host_ms_per_iteration": 1000.0 * host_s / max(iterations, 1),
            "ort_runs": ort_runs,
            "note": "cProfile adds its own overhead to every Python call: read the ranking, not the absolute ms",
            "top": rows[:25]}
