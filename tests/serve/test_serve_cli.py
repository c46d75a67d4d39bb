"""The specdec-serve command: it serves until SIGTERM and then stops with its tritonserver and every process it
started; errors are one line; the runtime and the serve schema import without PyTriton."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("pytriton")
tritonclient_http = pytest.importorskip("tritonclient.http")

from specdec.runtime import SpeculativeDecoder  # noqa: E402
from specdec.serve.server import free_port, free_ports  # noqa: E402

from triton_clients import as_dict, inputs, wait_ready  # noqa: E402
from triton_standalone import UNCLEAN  # noqa: E402

SERVE = [sys.executable, "-m", "specdec.serve.cli"]


def _descendants(pid: int) -> set:
    """Every process below `pid` (from /proc), recursively."""
    children: dict = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:            # a zombie is dead (its parent has not reaped it yet)
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _group_empty(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def test_serve_answers_then_stops_cleanly_on_sigterm(tiny_export, tmp_path):
    http_port, grpc_port, metrics_port = free_ports(3)
    log = open(tmp_path / "serve.log", "wb")
    proc = subprocess.Popen([*SERVE, "--export", str(tiny_export), "--host", "127.0.0.1", "--http-port",
                             str(http_port), "--grpc-port", str(grpc_port), "--metrics-port", str(metrics_port),
                             "--exit-timeout", "1"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"127.0.0.1:{http_port}"
        assert wait_ready(url, 120, alive=lambda: proc.poll() is None), (tmp_path / "serve.log").read_text()
        client = tritonclient_http.InferenceServerClient(url)
        try:
            got = as_dict(client.infer("specdec", inputs(tritonclient_http, "w5 w6 w7", max_new_tokens=6, gamma=2,
                                                          draft="draft")))
        finally:
            client.close()
        assert got["token_ids"] == SpeculativeDecoder.load(tiny_export, provider="cpu").generate(
            "w5 w6 w7", max_new_tokens=6, gamma=2, draft="draft").token_ids
        started = _descendants(proc.pid)
        names = {Path(f"/proc/{pid}/comm").read_text().strip() for pid in started if _alive(pid)}
        assert "tritonserver" in names, names
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, (tmp_path / "serve.log").read_text()[-3000:]
        end = time.monotonic() + 20          # children may take a moment to be reaped after the parent's exit
        while time.monotonic() < end and (any(_alive(pid) for pid in started) or not _group_empty(proc.pid)):
            time.sleep(0.2)
        left = [pid for pid in started if _alive(pid)]
        assert not left and _group_empty(proc.pid), f"left behind: {left}"
        log = (tmp_path / "serve.log").read_text(errors="replace")
        assert "specdec-serve: stopped" in log
        # every process of the server ended cleanly, even with an exit timeout shorter than its stubs take to unload
        # their models (1 to 2 s): Triton used to exit first, and they ended non-gracefully (exit 1, at times an
        # abort or stuck for good)
        unclean = [line for line in log.splitlines() if any(mark in line for mark in UNCLEAN)]
        assert not unclean, "\n".join(unclean)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def test_a_bad_engine_is_one_line(tmp_path):
    for extra in ([], ["--write-model-repository", str(tmp_path / "repo")]):
        res = subprocess.run([*SERVE, "--export", str(tmp_path / "nothing"), "--http-port", str(free_port()),
                              *extra], capture_output=True, text=True, timeout=120)
        assert res.returncode == 2, res.stderr
        lines = [line for line in res.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and "nothing" in lines[0], res.stderr


def test_without_pytriton_the_runtime_imports_and_serve_says_how_to_install(tiny_export):
    """PyTriton blocked from import (as if only `pip install specdec` were installed)."""
    code = ("import sys; sys.modules['pytriton'] = None\n"
            "import specdec.runtime, specdec.serve.schema, specdec.serve.repository\n"
            "assert not [m for m in sys.modules if m.startswith('pytriton') and sys.modules[m] is not None]\n"
            "from specdec.serve.cli import main\n"
            f"sys.exit(main(['--export', {str(tiny_export)!r}]))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().count("\n") == 0 and 'pip install -e ".[serve]"' in res.stderr, res.stderr


def test_a_port_in_use_is_one_line(tiny_export):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        http_port, metrics_port = free_ports(2)
        res = subprocess.run([*SERVE, "--engine", str(tiny_export), "--address", "127.0.0.1", "--http-port",
                              str(http_port), "--grpc-port", str(port), "--metrics-port", str(metrics_port)],
                             capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert res.stderr.startswith(f"error: cannot listen on 127.0.0.1:{port} (--grpc-port)"), res.stderr


def test_sigterm_while_starting_stops_too(tiny_export, tmp_path):
    """SIGTERM before the models are ready (PyTriton can wait up to 2 minutes for its server) ends the start."""
    http_port, grpc_port, metrics_port = free_ports(3)
    proc = subprocess.Popen([*SERVE, "--export", str(tiny_export), "--host", "127.0.0.1", "--http-port",
                             str(http_port), "--grpc-port", str(grpc_port), "--metrics-port", str(metrics_port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        end = time.monotonic() + 60          # wait until tritonserver exists, then interrupt its start
        while time.monotonic() < end and not any(
                Path(f"/proc/{pid}/comm").read_text().strip() == "tritonserver"
                for pid in _descendants(proc.pid) if _alive(pid)):
            time.sleep(0.05)
        started = _descendants(proc.pid)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        end = time.monotonic() + 20
        while time.monotonic() < end and (any(_alive(pid) for pid in started) or not _group_empty(proc.pid)):
            time.sleep(0.2)
        assert not [pid for pid in started if _alive(pid)] and _group_empty(proc.pid)
        # the start was abandoned (a finished start would exit 0 after serving): run_cli's "interrupted", 130
        assert proc.returncode == 130 and "error: interrupted" in proc.stderr.read().decode(), proc.returncode
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def test_the_server_listens_on_this_machine_only_unless_told():
    """--host defaults to 127.0.0.1 (the Server class too); --address, its earlier name, still sets it."""
    import inspect

    from specdec.serve.cli import parser
    from specdec.serve.server import Server

    assert parser().parse_args([]).address == "127.0.0.1"
    assert inspect.signature(Server).parameters["address"].default == "127.0.0.1"
    assert parser().parse_args(["--host", "0.0.0.0"]).address == "0.0.0.0"
    assert parser().parse_args(["--address", "10.0.0.2"]).address == "10.0.0.2"
    assert "--address" not in parser().format_help()


def test_the_provider_is_a_flag_and_a_written_repository_keeps_it(tiny_export, tmp_path):
    """--provider takes the runtime's choices (a bad one is one line); a written model repository passes it to the
    decoder its model.py loads (config.pbtxt's parameters), as it does --threads."""
    res = subprocess.run([*SERVE, "--export", str(tiny_export), "--provider", "gpu"], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "--provider" in res.stderr, res.stderr
    res = subprocess.run([*SERVE, "--export", str(tiny_export), "--provider", "cpu", "--threads", "1",
                          "--write-model-repository", str(tmp_path / "repo")], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    for model in ("specdec", "specdec_stream"):
        config = (tmp_path / "repo" / model / "config.pbtxt").read_text()
        assert 'key: "provider"\n  value: { string_value: "cpu" }' in config, config
        assert 'key: "threads"\n  value: { string_value: "1" }' in config, config


def test_graph_capture_is_a_flag_and_a_written_repository_keeps_it(tiny_export, tiny_capture_export, tmp_path):
    """--graph-capture reaches SpeculativeDecoder.load: an export without the capturable graphs is refused in one line
    before Triton starts (a written repository's export is checked too); a written repository passes it to the
    decoder its model.py loads (config.pbtxt's parameters). What a decoder loaded so serves: tests/serve/
    test_serve.py."""
    for extra in ([], ["--write-model-repository", str(tmp_path / "refused")]):
        res = subprocess.run([*SERVE, "--export", str(tiny_export), "--provider", "cpu", "--graph-capture",
                              "--http-port", str(free_port()), *extra], capture_output=True, text=True, timeout=120)
        assert res.returncode == 2, res.stderr
        lines = [line for line in res.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith(f"error: export '{tiny_export}") and \
            "has no capturable graphs; re-export it with specdec-export ... --graph-capture" in lines[0], res.stderr
    assert not (tmp_path / "refused").exists()
    for flag, value in (([], "false"), (["--graph-capture"], "true")):
        repo = tmp_path / f"repo-{value}"
        res = subprocess.run([*SERVE, "--export", str(tiny_capture_export), "--provider", "cpu", *flag,
                              "--write-model-repository", str(repo)], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        for model in ("specdec", "specdec_stream"):
            config = (repo / model / "config.pbtxt").read_text()
            assert f'key: "graph_capture"\n  value: {{ string_value: "{value}" }}' in config, config


def test_a_written_repository_s_model_loads_the_capturable_graphs(tiny_capture_export, tmp_path, monkeypatch):
    """The model.py a repository written with --graph-capture holds reads config.pbtxt's parameters (as Triton's
    Python backend hands them over, its utilities stubbed) and loads the decoder with graph_capture=True."""
    import json
    import re
    import types

    from specdec.serve.repository import write_model_repository

    stub = types.ModuleType("triton_python_backend_utils")
    stub.using_decoupled_model_transaction_policy = lambda config: False
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", stub)
    repo = write_model_repository(tmp_path / "repo", tiny_capture_export, threads=1, provider="cpu",
                                  graph_capture=True)
    config = (repo / "specdec" / "config.pbtxt").read_text()
    parameters = {key: {"string_value": value} for key, value in
                  re.findall(r'key: "(\w+)"\n  value: \{ string_value: "([^"]*)" \}', config)}
    assert parameters["graph_capture"] == {"string_value": "true"}
    namespace: dict = {}
    exec(compile((repo / "specdec" / "1" / "model.py").read_text(), "model.py", "exec"), namespace)
    model = namespace["TritonPythonModel"]()
    model.initialize({"model_config": json.dumps({"parameters": parameters})})
    try:
        assert model.handler.decoder.captured and model.handler.decoder.provider == "cpu"
    finally:
        model.finalize()
