"""What machine a measurement was taken on: CPU model, cores, memory, load, library versions."""

from __future__ import annotations

import os
import platform
import time


def _proc_field(path: str, prefix: str) -> str | None:
    """The rest of the first line of a /proc file that starts with `prefix` (None where /proc cannot say)."""
    try:
        with open(path) as fh:
            return next((line[len(prefix):].strip() for line in fh if line.startswith(prefix)), None)
    except OSError:
        return None


def load_average() -> list | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def resident_mib(pid: int | None = None) -> dict:
    """Resident memory (MiB, VmRSS) of process `pid` (default: this one), alone and with all its descendants (a
    server's tritonserver and stub processes); {} where /proc cannot say."""
    def rss_mib(p) -> float:
        return int((_proc_field(f"/proc/{p}/status", "VmRSS:") or "0 kB").split()[0]) / 1024

    pid = os.getpid() if pid is None else pid
    children: dict = {}
    try:
        for entry in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    parent = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry))
    except OSError:
        return {}
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop())
        todo.extend(children.get(tree[-1], []))
    return {"process_mib": round(rss_mib(pid), 1), "with_children_mib": round(sum(map(rss_mib, tree)), 1)}


def _version(module: str) -> str | None:
    try:
        return getattr(__import__(module), "__version__", "unknown")
    except Exception:   # not installed, or broken: the report says so
        return None


def cpu_busy(seconds: float = 1.0) -> float | None:
    """Fraction of all cores busy over the next `seconds` (/proc/stat) while this process sleeps."""
    def sample():
        with open("/proc/stat") as fh:
            values = [int(v) for v in fh.readline().split()[1:]]
        return sum(values), values[3] + (values[4] if len(values) > 4 else 0)      # total, idle + iowait
    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    return 1.0 - (idle1 - idle0) / max(total1 - total0, 1)


def describe(provider: str | None = None, threads: int = 0) -> dict:
    import numpy
    import onnxruntime

    memory = _proc_field("/proc/meminfo", "MemTotal:")
    return {
        "cpu_model": (_proc_field("/proc/cpuinfo", "model name") or "").lstrip(":\t ")
                     or platform.processor() or platform.machine(),
        "cpu_cores": os.cpu_count(),
        "cpu_cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_gib": round(int(memory.split()[0]) / 2 ** 20, 1) if memory else None,
        "load_average_at_start": load_average(),
        "cpu_busy_before_run": cpu_busy(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "provider": provider,
        "threads": threads,
        "specdec_threads": os.environ.get("SPECDEC_THREADS"),      # what threads 0 means when set (runtime guide)
        "onnxruntime": onnxruntime.__version__,
        "onnxruntime_providers": onnxruntime.get_available_providers(),
        "numpy": numpy.__version__,
        **{name: _version(name) for name in ("torch", "transformers", "ctranslate2")},
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def busy_warning(machine: dict) -> str | None:
    """A warning when other processes keep more than a quarter of the CPU busy just before the run."""
    busy = machine.get("cpu_busy_before_run")
    if busy is not None and busy > 0.25:
        return (f"warning: other processes used {100 * busy:.0f}% of the CPU just before the run: timings are noisy "
                "and speedups may be understated")
    return None


def one_line(machine: dict) -> str:
    busy = machine.get("cpu_busy_before_run")
    return (f"{machine['cpu_model']}, {machine['cpu_cores']} cores, {machine.get('memory_gib')} GiB, "
            f"provider {machine.get('provider')}, onnxruntime {machine['onnxruntime']}"
            + (f", CPU {100 * busy:.0f}% busy just before the run" if busy is not None else ""))
