"""Shared fixtures: tiny random T5 checkpoints (written to disk like real ones) and one tiny export of a pair.

Everything here is offline and small enough for 2 CPU cores: vocab 48 (the tokenizer's 40 ids and 8 padded rows,
as in every real T5), d_model 16-32, 1-2 layers.

    make_tiny_t5(path, ...)      -> path   a T5ForConditionalGeneration checkpoint + fast tokenizer (also the
                                           fixture `tiny_t5_factory`)
    tiny_t5_model(...)           -> model  the same random model, in memory only (no tokenizer)
    write_tiny_tokenizer(path, vocab), tiny_t5_config(...), fill_hub_cache(...), run_export_cli(argv)
    tiny_pair                    -> (target_dir, draft_dir)    session scope
    tiny_export                  -> Path of an export directory made by `specdec-export`, session scope
    tiny_export_log              -> (stdout, stderr) of that export
    whisper_pair                 -> (target model, root): tinymodels.exported_whisper_pair's default pair, session
    bundled_export               -> Path of the bundled pair (models/) exported with --max-length 256, session
    shared_dir(tmp_path_factory, key, build) -> Path   build(path) once per test run, for every worker process

Session fixtures that build models or exports are built once per run, not once per worker process: the first worker
that asks builds them under a directory both workers share (shared_dir, a file lock around the build), the other
waits for it. What they return is read-only to the tests: a test that changes an export copies it first.
    offline_hub_factory          -> apply(cache_dir): this test runs offline (HF_HUB_OFFLINE=1) with its hub
                                           cache at cache_dir (environment and huggingface_hub.constants)
    built_site                   -> Path of the documentation site built with `mkdocs build --strict`, session
                                           (skipped where the dev extra's site tools are missing)

The plain functions live in tests/tinymodels.py; test modules import them from there (`from tinymodels import
make_tiny_t5`), since `from conftest import ...` is ambiguous once a subfolder has a conftest.py of its own.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tinymodels import (  # noqa: F401  (re-exported for fixtures)
    tiny_vocab,
    write_tiny_tokenizer,
    tiny_t5_config,
    tiny_t5_model,
    make_tiny_t5,
    run_export_cli,
    fill_hub_cache,
    _hub_settings,
    read_manifest,
    shared_dir,
)


# One intra-op thread per ONNX Runtime session in every test process and the processes they start (C programs,
# tritonserver, the bench): see _one_thread_per_worker. onnxruntime's own default is tested in
# tests/runtime/engine/test_intra_op_threads.py.
os.environ.setdefault("SPECDEC_THREADS", "1")

PADDED_TOKENS = 40      # the tokenizer's ids in the shared pairs, of their 48 rows (as a real T5: 32,100 of 32,128)


@pytest.fixture(scope="session", autouse=True)
def _one_thread_per_worker():
    """The suite runs in two worker processes (pyproject.toml's addopts), one per core here, so each keeps to one thread:
    - every ONNX Runtime session gets one intra-op thread: SPECDEC_THREADS=1, set above for this process and the
      processes it starts. Measured on the test models: the same tokens for the same seeds (6,000 sampled requests
      compared), and 0.78 against 0.90 ms a request alone; two processes at once 2.8 against 9.9 ms.
    - in a worker, PyTorch (the references: transformers' generate and beam search, the exports) runs on one thread, and
      so do the PyTorch subprocesses it starts (OMP_NUM_THREADS=1, which PyTorch reads at start). Two workers each
      asking PyTorch for a thread per core left tests/runtime/decoding/test_beam.py and tests/models/test_distill.py at 127 s
      side by side, against 76 s with one thread each (237 and 135 CPU-seconds)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)
        os.environ["OMP_NUM_THREADS"] = "1"
    yield


@pytest.fixture(autouse=True)
def _pytorch_back_to_one_thread():
    """Code under test may set PyTorch's threads (the bench's peers and beam report set two in the test process): a
    worker goes back to one thread after each test, so that every later test in it shares the cores as above. Left at
    two, the bundled pair's beam search test took 252 s in a whole-suite run against 62 s with this reset, and the whole
    suite 23.7 against 17.4 minutes (27.8 before either fixture kept PyTorch to one thread)."""
    yield
    torch = sys.modules.get("torch")        # imported by the worker's first fixture (above)
    if torch is not None and os.environ.get("PYTEST_XDIST_WORKER") and torch.get_num_threads() != 1:
        torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_t5_factory():
    return make_tiny_t5


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory):
    """(target_dir, draft_dir): v1.1-style target (2+2 layers, d_model 32) and a 1-layer d_model-16 draft,
    same tokenizer. The real T5 layout: 48 vocabulary rows, of which the tokenizer makes 40 (w3 .. w39; rows
    40..47 padded)."""
    def build(root):
        make_tiny_t5(root / "target", d_model=32, d_kv=8, heads=3, layers=2, decoder_layers=2, v11=True,
                     seed=1, tokens=PADDED_TOKENS)
        make_tiny_t5(root / "draft", d_model=16, d_kv=8, heads=2, layers=1, decoder_layers=1, v11=True,
                     seed=2, tokens=PADDED_TOKENS)

    root = shared_dir(tmp_path_factory, "tiny_pair", build)
    return root / "target", root / "draft"


@pytest.fixture(scope="session")
def _tiny_export_run(tmp_path_factory, tiny_pair):
    target, draft = tiny_pair

    def build(root):
        code, stdout, stderr = run_export_cli(["--target", target, "--draft", draft, "--export", root / "export",
                                               "--gamma-max", "8", "--max-length", "64"])
        assert code == 0, f"specdec-export failed ({code}):\n{stdout}\n{stderr}"
        (root / "log.json").write_text(json.dumps({"stdout": stdout, "stderr": stderr}))

    root = shared_dir(tmp_path_factory, "tiny_export", build)
    log = json.loads((root / "log.json").read_text())
    return root / "export", log["stdout"], log["stderr"]


@pytest.fixture(scope="session")
def tiny_export(_tiny_export_run) -> Path:
    """Export directory of `tiny_pair` (gamma_max 8, max_length 64, fp32). Treat it as read-only."""
    return _tiny_export_run[0]


@pytest.fixture(scope="session")
def tiny_export_log(_tiny_export_run) -> tuple[str, str]:
    return _tiny_export_run[1], _tiny_export_run[2]


@pytest.fixture(scope="session")
def tiny_capture_export(tmp_path_factory, tiny_pair) -> Path:
    """Export directory of `tiny_pair` as `tiny_export`, with the capturable graphs (--graph-capture) too, for
    SpeculativeDecoder.load(..., graph_capture=True) and the surfaces that pass it. Treat it as read-only."""
    target, draft = tiny_pair

    def build(root):
        code, stdout, stderr = run_export_cli(["--target", target, "--draft", draft, "--export", root / "export",
                                               "--gamma-max", "8", "--max-length", "64", "--graph-capture"])
        assert code == 0, f"specdec-export --graph-capture failed ({code}):\n{stdout}\n{stderr}"

    return shared_dir(tmp_path_factory, "tiny_capture_export", build) / "export"


@pytest.fixture(scope="session")
def whisper_pair(tmp_path_factory):
    """(target model, root): tinymodels.exported_whisper_pair with its defaults (the pair the runtime, C API and
    serving tests share), root/target, root/draft and root/export built once per run. The target model is rebuilt
    in memory in each worker from the same seed (whisper_pair_models: what was saved and exported)."""
    from tinymodels import exported_whisper_pair, whisper_pair_models

    root = shared_dir(tmp_path_factory, "whisper_pair", exported_whisper_pair)
    target, _ = whisper_pair_models(vocab=40, seed=6)      # exported_whisper_pair's defaults
    return target, root


@pytest.fixture(scope="session")
def bundled_export(tmp_path_factory):
    """The bundled pair (models/) exported as `specdec-export --export OUT --max-length 256` does (no --target or
    --draft), once per run; skips where models/ holds no trained pair."""
    def build(out):
        code, stdout, stderr = run_export_cli(["--export", out, "--max-length", "256"])
        assert code == 0 or "bundled pair" in stderr, stderr
        (out.parent / "bundled_export.log.json").write_text(json.dumps({"code": code, "stdout": stdout,
                                                                         "stderr": stderr}))

    out = shared_dir(tmp_path_factory, "bundled_export", build)
    log = json.loads((out.parent / "bundled_export.log.json").read_text())
    if log["code"] != 0:
        pytest.skip(log["stderr"].strip())
    assert "parity" in log["stdout"]
    return out


@pytest.fixture
def offline_hub_factory(monkeypatch):
    """offline_hub_factory(cache_dir): from here on the test is offline with its hub cache at cache_dir.

    huggingface_hub reads the environment once, at import, into huggingface_hub.constants (and transformers looks
    the values up there at call time), so both the environment and those constants are patched. Sockets cannot
    connect; `offline_hub_factory.connections` lists the attempts."""
    import socket

    import huggingface_hub.constants as constants

    def no_network(sock, address, *args, **kwargs):
        apply.connections.append(address)
        raise OSError(f"network access in an offline test: {address}")

    def apply(cache_dir):
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        monkeypatch.setattr(socket.socket, "connect", no_network)
        monkeypatch.setattr(socket.socket, "connect_ex", no_network)
        env, consts = _hub_settings(cache_dir)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        for key, value in consts.items():
            if hasattr(constants, key):
                monkeypatch.setattr(constants, key, value)
        return Path(cache_dir)

    apply.connections = []      # addresses anything tried to connect to (each attempt also fails)
    return apply


# The suite runs in two worker processes that take whole files (pyproject.toml: -n 2 --dist loadfile
# --no-loadscope-reorder). A heavy file that starts last keeps one worker busy while the other has nothing left, so the
# files are collected longest first and the light ones fill in behind them; the comments give each file's share of the
# whole suite's test time (the sum of --durations=0 by file in a whole-suite run on 2 cores: compare shares, not
# seconds). Only the order of whole files changes.
HEAVY_FIRST = ("runtime/decoding/test_distribution_chains.py",           # 17.5 % (2026-11-28: 21:59 in all)
               "runtime/decoding/test_distribution.py",                  # 12.7
               "runtime/engine/test_int8.py",                          # 9.5
               "runtime/decoding/test_distribution_chain_loop.py",       # 8.6
               "runtime/test_bundled_pair.py",                  # 5.5
               "runtime/families/test_whisper.py",                       # 3.9
               "models/test_speech_pair.py",                    # (new: an export of the bundled speech pair)
               "runtime/families/test_timestamps.py",                    # (new: a chi-square with timestamps)
               "serve/test_serve_timestamps.py",                # (new)
               "serve/test_serve.py",                           # 3.0
               "bindings/test_capi_valgrind.py",                # 2.9
               "runtime/decoding/test_beam.py",                          # 2.4
               "runtime/decoding/test_batch.py",                         # 2.3
               "runtime/loading/test_fuzz_export.py",                   # 2.3 (its fuzzing stops after 60 s)
               "bench/test_dtypes.py",                          # 2.1
               "models/test_speech_gpu.py",                     # (new: speech-gpu run twice at a small size)
               "bindings/test_capi_untrusted.py",               # 2.0 (the same)
               "bench/test_gpu.py",                             # 1.9
               "runtime/decoding/test_processors.py",                    # 1.4
               "runtime/decoding/test_candidates.py",                    # 1.2
               "bench/test_cli.py",                             # 1.2
               "bindings/test_capi_examples.py",                # 1.0
               "serve/test_serve_whisper.py",                   # 0.9
               "models/test_distill.py",                        # 0.9
               "bindings/test_capi_whisper.py")                 # 0.9


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0].removeprefix("tests/"), len(rank)))


# -- the documentation site ---------------------------------------------------------------------------------------

def _site_tools_missing() -> str | None:
    """The first of the site's build tools (the dev extra's) that is not installed, or None."""
    import importlib.util

    for module, package in (("mkdocs", "mkdocs"), ("material", "mkdocs-material"),
                            ("mkdocstrings", "mkdocstrings"), ("mkdocstrings_handlers.python", "mkdocstrings-python")):
        try:
            found = importlib.util.find_spec(module)
        except ModuleNotFoundError:
            found = None
        if found is None:
            return package
    return None


@pytest.fixture(scope="session")
def built_site(tmp_path_factory) -> Path:
    """The MkDocs site built once per worker with --strict (the build failing fails every test that reads it)."""
    import subprocess

    missing = _site_tools_missing()
    if missing:
        pytest.skip(f"{missing} is not installed (it is in the dev extra: pip install -e \".[dev]\")")
    root = Path(__file__).resolve().parents[1]
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"),
                          "-d", str(out)], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stdout}\n{run.stderr}"
    return out
