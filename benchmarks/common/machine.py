"""What machine a measurement was taken on: CPU model, cores, memory, load, library versions."""

from __future__ import annotations

import os
import platform
import time


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2 ** 20, 1)
    except OSError:
        pass
    return None


def load_average() -> list | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def resident_mib(pid: int | None = None) -> dict:
    """Resident memory (MiB, VmRSS) of process `pid` (default: this one) and of it with all its descendants (a
    server's tritonserver and stub processes); {} where /proc cannot say."""
    def rss_kib(p) -> int:
        try:
            with open(f"/proc/{p}/status") as fh:
                return next((int(line.split()[1]) for line in fh if line.startswith("VmRSS:")), 0)
        except OSError:
            return 0

    pid = os.getpid() if pid is None else pid
    children: dict = {}
    try:
        for entry in os.listdir("/proc"):
            if entry.isdigit():
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
        p = todo.pop()
        tree.append(p)
        todo.extend(children.get(p, []))
    return {"process_mib": round(rss_kib(pid) / 1024, 1), "with_children_mib": round(sum(map(rss_kib, tree)) / 1024, 1)}


def _version(module: str) -> str | None:
    try:
        mod = __import__(module)
    except Exception:   # not installed, or broken: the report says so
        return None
    return getattr(mod, "__version__", "unknown")


def describe(provider: str | None = None, threads: int = 0) -> dict:
    """The machine's description for the JSON report."""
    import numpy
    import onnxruntime

    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpu_model": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "cpu_cores_usable": affinity,
        "memory_gib": _memory_gib(),
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
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        "ctranslate2": _version("ctranslate2"),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def cpu_busy(seconds: float = 1.0) -> float | None:
    """Fraction of all cores busy over the next `seconds` (from /proc/stat), while this process sleeps: what other
    processes use right now (the load average also remembers the last minutes)."""
    def sample():
        with open("/proc/stat") as fh:
            values = [int(v) for v in fh.readline().split()[1:]]
        idle = values[3] + (values[4] if len(values) > 4 else 0)
        return sum(values), idle
    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    return 1.0 - (idle1 - idle0) / max(total1 - total0, 1)


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
