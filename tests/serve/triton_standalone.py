"""Run a model repository written by `specdec-serve --write-model-repository` on a stand-alone tritonserver: the
binary and Python backend that PyTriton ships, started directly (no PyTriton in the loop), as Triton's own
container would start it: `tritonserver --model-repository DIR`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path


def tritonserver_command(repo, backends: Path, http_port: int, grpc_port: int, metrics_port: int) -> tuple:
    """(argv, env) for PyTriton's tritonserver binary serving `repo` on 127.0.0.1; `backends` is a directory this
    fills with the Python backend and the stub for this Python version (PyTriton keeps the stubs apart)."""
    from pytriton.utils.distribution import get_libs_path, get_root_module_path, get_stub_path

    root = get_root_module_path() / "tritonserver"
    python = backends / "python"
    if not python.exists():
        shutil.copytree(root / "backends" / "python", python, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(get_stub_path(f"{sys.version_info.major}.{sys.version_info.minor}"),
                    python / "triton_python_backend_stub")
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
