"""Run a model repository written by `specdec-serve --write-model-repository` on a stand-alone tritonserver: the
binary and Python backend that PyTriton ships, started directly (no PyTriton in the loop), as Triton's own
container would start it: `tritonserver --model-repository DIR`. stop() stops it as a process manager would (SIGTERM
to its process group) and says what did not end cleanly: each model's Python runs in a stub process whose exit
tritonserver reaps without a word, so a stub that crashes while the server stops goes unseen unless looked for."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from contextlib import contextmanager
from pathlib import Path

STUB = "triton_python_backend_stub"
# what the server's log holds when a stub did not end cleanly: the report of Python's fault handler (the written
# model.py enables it; the stub's interpreter ignores PYTHONFAULTHANDLER) when a fatal signal hits the stub while its
# Python runs (its last garbage collection included), the server's line when it gave up waiting for a model to unload
# (--exit-timeout-secs), the stub's own line when it outlived its server, and the C++ runtime's when a process
# aborted (std::terminate). A crash after the stub's Python has ended reaches only the kernel log (stop() reads it
# where it can). PyTriton's tritonserver (specdec-serve) writes the same lines to specdec-serve's output.
UNCLEAN = ("Fatal Python error", "Non-graceful termination", "Exit timeout expired", "terminate called")


def tritonserver_command(repo, backends: Path, http_port: int, grpc_port: int, metrics_port: int) -> tuple:
    """(argv, env) for PyTriton's tritonserver binary serving `repo` on 127.0.0.1; `backends` is a directory this
    fills with the Python backend and the stub for this Python version (PyTriton keeps the stubs apart)."""
    from pytriton.utils.distribution import get_libs_path, get_root_module_path, get_stub_path

    root = get_root_module_path() / "tritonserver"
    python = backends / "python"
    if not python.exists():
        shutil.copytree(root / "backends" / "python", python, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(get_stub_path(f"{sys.version_info.major}.{sys.version_info.minor}"),
                    python / STUB)
    env = dict(os.environ)
    libs = [str(get_libs_path()), sysconfig.get_config_var("LIBDIR")]
    env["LD_LIBRARY_PATH"] = os.pathsep.join([*libs, *filter(None, [env.get("LD_LIBRARY_PATH")])])
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])   # the stub's Python
    argv = [str(root / "bin" / "tritonserver"), f"--model-repository={repo}", f"--backend-directory={backends}",
            f"--cache-directory={root / 'caches'}", "--http-address=127.0.0.1", f"--http-port={http_port}",
            "--grpc-address=127.0.0.1", f"--grpc-port={grpc_port}", "--metrics-address=127.0.0.1",
            f"--metrics-port={metrics_port}", "--exit-timeout-secs=3"]
    return argv, env


def start(repo, workdir: Path, ports) -> subprocess.Popen:
    argv, env = tritonserver_command(repo, workdir / "backends", *ports)
    log = open(workdir / "tritonserver.log", "wb")
    return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def _alive(pid: int) -> bool:
    """`pid` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def stub_pids(proc: subprocess.Popen) -> set:
    """The pids of the running server's stubs (its children; one per model instance)."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                comm, rest = (entry / "stat").read_text().split("(", 1)[1].rsplit(")", 1)
                if comm == STUB[:15] and int(rest.split()[1]) == proc.pid:      # the kernel keeps 15 characters
                    pids.add(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return pids


def _kernel_crashes(pids: set, since: float) -> list:
    """The kernel log's lines about `pids` dying of a signal after `since` (seconds since boot); [] where the kernel
    log cannot be read."""
    try:
        text = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for line in text.splitlines():
        m = re.match(r"\[\s*([\d.]+)\]\s+(\S+)\[(\d+)\]:\s+(segfault|trap|general protection)", line)
        if m and float(m.group(1)) >= since and int(m.group(3)) in pids:
            found.append(line.strip())
    return found


def stop(proc: subprocess.Popen, workdir: Path, timeout_s: float = 30) -> list:
    """SIGTERM the server's process group (tritonserver and its stubs), wait for all of them to end, and return what
    did not end cleanly: tritonserver's exit status if not 0, stubs still alive, the log's lines of UNCLEAN, and the
    kernel log's reports of a stub killed by a signal (where it can be read). [] is a clean stop. The stubs' pids are
    taken just before the signal: call this while the server runs."""
    stubs, since = stub_pids(proc), _uptime() - 1
    if not stubs:
        return [f"no {STUB} running under tritonserver {proc.pid} before the stop"]
    os.killpg(proc.pid, signal.SIGTERM)
    problems = []
    try:
        code = proc.wait(timeout=timeout_s)
        if code != 0:
            problems.append(f"tritonserver exited with {code}")
    except subprocess.TimeoutExpired:
        problems.append(f"tritonserver still running {timeout_s} s after SIGTERM")
    end = time.monotonic() + 10           # a stub that outlived its server notices within about a second
    while time.monotonic() < end and any(_alive(pid) for pid in stubs):
        time.sleep(0.1)
    problems += [f"{STUB} {pid} still running after the stop" for pid in stubs if _alive(pid)]
    log = (workdir / "tritonserver.log").read_text(errors="replace")
    problems += [line for line in log.splitlines() if any(mark in line for mark in UNCLEAN)]
    problems += _kernel_crashes(stubs, since)
    return problems


@contextmanager
def serving(repo, workdir: Path, ports):
    """tritonserver on `repo`, ready at 127.0.0.1:ports[0] (HTTP) and ports[1] (gRPC): yields its process, then
    stops it, and it must end cleanly (stop()); a server the body or its start left running is killed."""
    from triton_clients import wait_ready

    proc = start(repo, workdir, ports)
    try:
        assert wait_ready(f"127.0.0.1:{ports[0]}", 90, alive=lambda: proc.poll() is None), \
            (workdir / "tritonserver.log").read_text()
        yield proc
        problems = stop(proc, workdir)
        assert not problems, "\n".join(problems)
    finally:
        if proc.poll() is None:          # a server that failed to start has exited already: its log says why
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
