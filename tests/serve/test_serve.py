"""specdec-serve's Triton server (PyTriton, the real tritonserver binary) on 127.0.0.1, free ports, one decoder
and its batch behind both models, driven by tritonclient over HTTP and gRPC: outputs equal the Python API's
(greedy rows of a batch equal the prompt alone; requests a batch cannot run, with a draft model, run alone and
equal generate() in every count), streamed pieces join to the same text, 16 and 64 concurrent clients, bad
requests, health/readiness/metrics. One server for the module; few tokens."""

from __future__ import annotations

import concurrent.futures
import threading
import json
import re
import urllib.request

import numpy as np
import pytest

pytest.importorskip("pytriton")
tritonclient_http = pytest.importorskip("tritonclient.http")
tritonclient_grpc = pytest.importorskip("tritonclient.grpc")

from specdec.runtime import SpecdecError, SpeculativeDecoder  # noqa: E402
from specdec.serve import schema  # noqa: E402
from specdec.serve.server import Server, free_ports  # noqa: E402

from triton_clients import DTYPES, INT_OUTPUTS, NUMPY, as_dict, grpc_stream, inputs  # noqa: E402

MAX_NEW = 12
# (prompt, parameters): greedy with the auto choice, the draft model greedy and sampled (these run alone), target
# only, the lookup (these three run in the batch; its sampled rows are exact in distribution, tests/runtime/
# test_batch.py, but which rounds use the lookup depends on the batch, so only greedy rows are compared token for
# token)
CASES = [
    ("w5 w6 w7 w8 w9", {"max_new_tokens": MAX_NEW}),
    ("w10 w3 w22 w10 w3", {"max_new_tokens": MAX_NEW, "gamma": 3, "draft": "draft"}),
    ("w11 w12", {"max_new_tokens": MAX_NEW, "gamma": 2, "draft": "draft", "temperature": 1.0, "top_k": 20,
                 "top_p": 0.9, "seed": 7}),
    ("w30 w31 w32", {"max_new_tokens": MAX_NEW, "gamma": 0}),
    ("w4 w5 w4 w5 w4", {"max_new_tokens": MAX_NEW, "gamma": 4, "draft": "lookup"}),
]
ALONE = [case for case in CASES if case[1].get("draft") == "draft"]   # run alone: every count is deterministic
FIXED = [case for case in CASES if "gamma" in case[1]]


@pytest.fixture(scope="module")
def served_export(tiny_export):
    return tiny_export


def expected(dec, prompt, params, counts=True):
    res = dec.generate(prompt, **params)
    out = {"text": res.text, "token_ids": res.token_ids, "stop_reason": res.stop_reason}
    if counts:
        out.update(new_tokens=res.stats.new_tokens, target_calls=res.stats.target_calls,
                   draft_calls=res.stats.draft_calls, proposed=res.stats.proposed, accepted=res.stats.accepted)
    return out


def served(client, module, prompt, params, model=schema.MODEL, **kw):
    return as_dict(client.infer(model, inputs(module, prompt, **params), **kw))


def _only(got: dict, want: dict) -> dict:
    return {key: got[key] for key in want}


@pytest.mark.parametrize("case", range(len(CASES)))
def test_http_and_grpc_equal_the_python_api(server, http, grpc, reference, case):
    prompt, params = CASES[case]
    want = expected(reference, prompt, params, counts=(prompt, params) in ALONE)
    assert want["token_ids"], "the reference generated nothing: the comparison would say little"
    for client, module in ((http, tritonclient_http), (grpc, tritonclient_grpc)):
        got = served(client, module, prompt, params)
        assert _only(got, want) == want, module.__name__


def _row(prompt, params):
    """A getter of one request of one row, as Triton's dynamic batching hands it to the handler ([1, 1] tensors)."""
    arrays = {name: np.array([[value.encode() if isinstance(value, str) else value]], dtype=NUMPY[DTYPES[name]])
              for name, value in {"prompt": prompt, **params}.items()}
    return arrays.get


def test_graph_capture_runs_every_request_alone_and_answers_as_the_eager_graphs(tiny_capture_export):
    """specdec-serve --graph-capture's decoder (schema.load_decoder(..., graph_capture=True)) behind the handler both
    models use, on an export with the capturable graphs (uncaptured on the CPU): every row of a Triton batch runs
    alone (batches need the eager graphs) and equals the eager decoder's answer, counts included but the draft's runs
    (the eager graphs propose gamma guesses in one run of the proposal loop, the capturable ones one run per guess);
    a stream's pieces join to the same tokens. (specdec-serve's flag reaching it: tests/serve/test_serve_cli.py.)"""
    eager = schema.load_decoder(tiny_capture_export, threads=1, provider="cpu")
    handler = schema.Handler(schema.load_decoder(tiny_capture_export, threads=1, provider="cpu", graph_capture=True),
                             max_batch=4)
    try:
        answers = schema.batch_answers(handler, [_row(prompt, params) for prompt, params in CASES])
        for (prompt, params), (out, error) in zip(CASES, answers):
            assert error is None, error
            want = expected(eager, prompt, params, counts="gamma" in params)
            want.pop("draft_calls", None)
            got = {"text": out["text"][0, 0].decode(), "token_ids": [int(t) for t in out["token_ids"][0] if t >= 0],
                   "stop_reason": out["stop_reason"][0, 0].decode(),
                   **{name: int(out[name][0, 0]) for name in want if name in INT_OUTPUTS}}
            assert got == want, (prompt, params)
        prompt, params = CASES[1]
        pieces = list(handler.stream(_row(prompt, params)))
        streamed = sum(([int(t) for t in p["token_ids"]] for p in pieces), [])
        assert streamed == expected(eager, prompt, params)["token_ids"]
    finally:
        handler.close()


def test_stats_outputs(http, reference):
    prompt, params = CASES[1]
    result = http.infer(schema.MODEL, inputs(tritonclient_http, prompt, **params))
    res = reference.generate(prompt, **params)
    assert result.as_numpy("stats_json").shape == (1, 1)       # Triton's batch dimension, then the output's
    stats = json.loads(result.as_numpy("stats_json")[0, 0])
    assert stats["accepted"] == res.stats.accepted and stats["proposed"] == res.stats.proposed > 0
    assert result.as_numpy("acceptance_rate")[0, 0] == pytest.approx(res.stats.acceptance_rate)
    assert result.as_numpy("tokens_per_target_call")[0, 0] == pytest.approx(res.stats.tokens_per_target_call)
    assert set(stats["sources"]) == set(res.stats.sources)


def test_grpc_stream_pieces_join_to_the_same_text(server, reference):
    items = [inputs(tritonclient_grpc, prompt, batched=False, **params) for prompt, params in FIXED]
    results = grpc_stream(f"127.0.0.1:{server.grpc_port}", schema.STREAM_MODEL, items)
    for (prompt, params), pieces in zip(FIXED, results):
        assert isinstance(pieces, list), pieces
        want_pieces = list(reference.stream(prompt, **params))
        want = reference.generate(prompt, **params)
        if (prompt, params) in ALONE:       # the same pieces; a batch's rounds cut them its own way
            assert [p["text"] for p in pieces] == [p.text for p in want_pieces]
            assert pieces[-1]["target_calls"] == want.stats.target_calls
        assert "".join(p["text"] for p in pieces) == want.text
        assert sum((p["token_ids"] for p in pieces), []) == want.token_ids
        assert [p["stop_reason"] for p in pieces] == [""] * (len(pieces) - 1) + [want.stop_reason]
    assert max(len(r) for r in results) > 1, "every request came back in one piece: nothing was streamed"


def test_concurrent_streams_that_run_alone_each_keep_the_decoder_to_their_end(server, reference):
    """Four gRPC streams at once with the draft model (they run alone, one after another, each holding the decoder
    from its first piece to its last): every stream's pieces are the Python API's. A stream advanced from a thread
    another stream had used lost the decoder to it."""
    jobs = [(f"w{10 + i} w{3 + i} w{22 - i} w{10 + i} w{3 + i}", {"max_new_tokens": MAX_NEW, "gamma": 2,
                                                               "draft": "draft"}) for i in range(4)]
    url = f"127.0.0.1:{server.grpc_port}"
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        futures = [pool.submit(grpc_stream, url, schema.STREAM_MODEL,
                               [inputs(tritonclient_grpc, prompt, batched=False, **params)]) for prompt, params in jobs]
        results = [f.result(timeout=120)[0] for f in futures]
    for (prompt, params), pieces in zip(jobs, results):
        assert isinstance(pieces, list), pieces
        assert [p["text"] for p in pieces] == [p.text for p in reference.stream(prompt, **params)]
    assert max(len(r) for r in results) > 1, "every stream came back in one piece: nothing held the decoder"


def test_eight_concurrent_clients_ten_requests_each(server, reference):
    jobs = [(f"w{3 + (c * 7 + r) % 40} w{3 + (c + r * 5) % 40} w{3 + (c * r) % 40}",
             {"max_new_tokens": 8, "gamma": 1 + (c + r) % 4, "draft": "draft", "temperature": float(r % 2),
              "seed": c * 10 + r}) for c in range(8) for r in range(10)]
    want = [expected(reference, prompt, params) for prompt, params in jobs]

    def client(c):
        module = tritonclient_grpc if c % 2 else tritonclient_http
        url = f"127.0.0.1:{server.grpc_port if c % 2 else server.http_port}"
        conn = module.InferenceServerClient(url)
        try:
            return [served(conn, module, *jobs[c * 10 + r]) for r in range(10)]
        finally:
            conn.close()

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(client, c) for c in range(8)]
        got = [f.result(timeout=120) for f in futures]
    assert [_only(item, w) for item, w in zip((item for per_client in got for item in per_client), want)] == want


@pytest.mark.parametrize("clients", [16, 64])
def test_concurrent_clients_share_batches_and_every_row_equals_its_prompt_alone(server, reference, clients):
    """16 and 64 clients at once (half HTTP, half gRPC), greedy requests the batch runs (auto, target only, the
    lookup): every answer equals generate() of its prompt alone, and the batch carried more than one row a round
    (the batcher's counters: rows decoded per target run; on a loaded machine the clients' requests once arrived
    one after another, each done before the next, 98 rows in 98 rounds: the decoder is now held until all are in)."""
    drafts = [{}, {"gamma": 0}, {"draft": "lookup", "gamma": 3}]
    jobs = [(f"w{3 + (c * 5) % 40} w{3 + (c * 3 + 1) % 40} w{3 + c % 7} w{3 + (c * 11) % 40}",
             {"max_new_tokens": 6 + c % 5, **drafts[c % 3]}) for c in range(clients)]
    want = [expected(reference, prompt, params, counts=False) for prompt, params in jobs]
    before = dict(server.handler.batcher.counters)
    ready = threading.Barrier(clients)      # every client connected before any sends: the requests arrive together

    def client(c):
        module = tritonclient_grpc if c % 2 else tritonclient_http
        conn = module.InferenceServerClient(f"127.0.0.1:{server.grpc_port if c % 2 else server.http_port}")
        try:
            ready.wait(timeout=60)
            return served(conn, module, *jobs[c])
        finally:
            conn.close()

    # the decoder held until every request is in the server (rows waiting in the batcher, the rest in Triton's
    # queue), so that they overlap however the clients' threads are scheduled on a loaded machine
    batcher, gate = server.handler.batcher, server.handler.decoder.scheduler.gate
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        hold = gate.acquire()
        try:
            futures = [pool.submit(client, c) for c in range(clients)]
            _wait_for(lambda: len(batcher.waiting) + _queued(server.metrics_port) >= clients,
                      "every request to reach the server", timeout_s=60)
        finally:
            gate.release(hold)
        got = [f.result(timeout=120) for f in futures]
    assert [_only(g, w) for g, w in zip(got, want)] == want
    assert all(g["error"] == "" for g in got)
    rounds = server.handler.batcher.counters["rounds"] - before["rounds"]
    rows = server.handler.batcher.counters["rows"] - before["rows"]
    assert rounds > 0 and rows > rounds, (rows, rounds)


def test_a_bad_row_beside_good_ones_gets_its_own_error_and_the_others_finish(http, reference):
    """One request of three rows ([3, 1] tensors): the row with a bad gamma answers stop_reason "error" and its
    one-line message in `error`; the other two equal their prompts alone."""
    import numpy as np

    prompts, gammas = ["w5 w6 w7", "w8 w9", "w10 w11 w12"], [0, 99, 3]
    text = tritonclient_http.InferInput("prompt", [3, 1], "BYTES")
    text.set_data_from_numpy(np.array([[p.encode()] for p in prompts], dtype=np.object_))
    gamma = tritonclient_http.InferInput("gamma", [3, 1], "INT64")
    gamma.set_data_from_numpy(np.array([[g] for g in gammas], dtype=np.int64))
    limit = tritonclient_http.InferInput("max_new_tokens", [3, 1], "INT64")
    limit.set_data_from_numpy(np.full((3, 1), MAX_NEW, dtype=np.int64))
    result = http.infer(schema.MODEL, [text, gamma, limit])
    errors = [e.decode() for e in result.as_numpy("error").reshape(-1)]
    reasons = [r.decode() for r in result.as_numpy("stop_reason").reshape(-1)]
    ids = result.as_numpy("token_ids")
    assert errors[0] == errors[2] == "" and "gamma must be an integer in 0..8 (got 99)" in errors[1]
    assert reasons[1] == "error" and (ids[1] == -1).all()
    for row in (0, 2):
        want = reference.generate(prompts[row], gamma=gammas[row], max_new_tokens=MAX_NEW)
        assert result.as_numpy("text")[row, 0].decode() == want.text and reasons[row] == want.stop_reason
        assert [int(t) for t in ids[row] if t >= 0] == want.token_ids


def _wait_for(condition, what: str, timeout_s: float = 30.0) -> None:
    import time

    end = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_past_the_queue_bounds_a_request_is_refused_at_once_and_serving_goes_on(tiny_export, reference):
    """A server with one row and one waiting request. While the test holds the decoder (so nothing decodes): a
    second stream is refused at once with the batcher's busy error; for `specdec`, a request past Triton's queue
    bound is refused by Triton. Released, the waiting requests finish with the right text and new ones are served."""
    import queue as queue_module

    ports = free_ports(3)
    with Server(tiny_export, max_batch=1, max_queue=1, queue_delay_us=0, http_port=ports[0], grpc_port=ports[1],
                metrics_port=ports[2], address="127.0.0.1", exit_timeout_s=2) as srv:
        batcher, gate = srv.handler.batcher, srv.handler.decoder.scheduler.gate
        prompt, params = "w5 w6 w7", {"max_new_tokens": MAX_NEW, "gamma": 0}
        want = reference.generate(prompt, **params)
        stream = tritonclient_grpc.InferenceServerClient(f"127.0.0.1:{ports[1]}")
        got: queue_module.Queue = queue_module.Queue()
        stream.start_stream(callback=lambda result, error: got.put((result, error)))
        hold = gate.acquire()
        try:
            stream.async_stream_infer(schema.STREAM_MODEL, inputs(tritonclient_grpc, prompt, batched=False, **params),
                                      request_id="first", enable_empty_final_response=True)
            _wait_for(lambda: len(batcher.waiting) == 1, "the first stream to wait for a row")
            stream.async_stream_infer(schema.STREAM_MODEL, inputs(tritonclient_grpc, prompt, batched=False, **params),
                                      request_id="second", enable_empty_final_response=True)
            _, error = got.get(timeout=30)
            assert error is not None and "the batcher is busy" in str(error), error
        finally:
            gate.release(hold)
        pieces = []
        while True:
            result, error = got.get(timeout=30)
            assert error is None, error
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
            pieces.append(as_dict(result))
        assert "".join(p["text"] for p in pieces) == want.text
        stream.stop_stream()
        stream.close()

        client = tritonclient_grpc.InferenceServerClient(f"127.0.0.1:{ports[1]}")
        answers: queue_module.Queue = queue_module.Queue()
        hold = gate.acquire()
        try:
            client.async_infer(schema.MODEL, inputs(tritonclient_grpc, prompt, **params),
                               callback=lambda result, error: answers.put(("a", result, error)))
            _wait_for(lambda: len(batcher.waiting) == 1, "the first request to wait for a row")
            client.async_infer(schema.MODEL, inputs(tritonclient_grpc, prompt, **params),       # Triton's queue
                               callback=lambda result, error: answers.put(("b", result, error)))
            _wait_for(lambda: _queued(ports[2]) >= 1, "the second request in Triton's queue")
            with pytest.raises(tritonclient_grpc.InferenceServerException) as err:
                client.infer(schema.MODEL, inputs(tritonclient_grpc, prompt, **params))
            assert "queue" in str(err.value).lower(), str(err.value)
        finally:
            gate.release(hold)
        done = sorted(answers.get(timeout=30) for _ in range(2))
        for _, result, error in done:
            assert error is None and as_dict(result)["text"] == want.text
        assert as_dict(client.infer(schema.MODEL, inputs(tritonclient_grpc, prompt, **params)))["text"] == want.text
        client.close()


def _queued(metrics_port: int) -> int:
    """Requests of `specdec` in Triton's queue now (its pending-request gauge)."""
    _, metrics = _get(f"http://127.0.0.1:{metrics_port}/metrics")
    lines = [line for line in metrics.splitlines()
             if line.startswith("nv_inference_pending_request_count") and f'model="{schema.MODEL}"' in line]
    return int(float(lines[0].rsplit(" ", 1)[1])) if lines else 0


def _error(call) -> str:
    with pytest.raises(Exception) as err:
        call()
    return str(err.value)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bad_requests_get_an_error_naming_the_problem_and_the_server_keeps_serving(server, http, grpc, reference,
                                                                                     protocol):
    client, module = (http, tritonclient_http) if protocol == "http" else (grpc, tritonclient_grpc)
    good_prompt, good = CASES[1]
    want = expected(reference, good_prompt, good)

    def bad(prompt, **kw):
        dtypes = kw.pop("dtypes", None)
        return _error(lambda: client.infer(schema.MODEL, inputs(module, prompt, dtypes=dtypes, **kw)))

    messages = {
        "missing prompt": (bad(None, gamma=2), "prompt"),
        "gamma out of range": (bad("w5 w6", gamma=99), str(SpecdecError("gamma must be an integer in 0..8 (got 99)",
                                                                        "use 0 <= gamma <= 8, or re-export with "
                                                                        "--gamma-max 99"))),
        "wrong dtype": (bad("w5 w6", gamma=2.0, dtypes={"gamma": "FP32"}), "gamma"),
        "unknown draft": (bad("w5 w6", draft="nosuch", gamma=2), "nosuch"),
        "empty prompt": (bad("  "), "the prompt is empty"),
        "negative temperature": (bad("w5", temperature=-1.0), "temperature must be a finite number >= 0"),
    }
    for what, (message, needle) in messages.items():
        assert needle in message, (what, message)
        if what != "wrong dtype":          # Triton's own message; the others are specdec's, as one line
            # Triton's python backend wraps it: "... TritonModelException: error: <problem>; <fix>." and its frames
            assert re.search(r"Exception: error: \S[^\n]*\.$", message, re.M), (what, message)
            assert "SpecdecError" not in message and "server.py" not in message, (what, message)
        assert _only(served(client, module, good_prompt, good), want) == want, f"after {what}"
    assert "FP32" in messages["wrong dtype"][0]
    assert "draft" in messages["unknown draft"][0]


def test_a_text_export_takes_no_audio(http, reference):
    """The audio inputs are declared for Whisper exports only: a text export's server refuses them as unknown inputs
    (Triton's message names the input) and goes on serving."""
    import numpy as np

    for model in (schema.MODEL, schema.STREAM_MODEL):
        assert [i["name"] for i in http.get_model_config(model)["input"]] == [f.name for f in schema.INPUTS]
    prompt, params = CASES[1]
    message = _error(lambda: http.infer(schema.MODEL, inputs(tritonclient_http, prompt, audio=np.zeros(160, np.float32),
                                                             **params)))
    assert "'audio'" in message, message
    assert served(http, tritonclient_http, prompt, params)["text"] == reference.generate(prompt, **params).text


def test_a_bad_streamed_request_errs_and_the_stream_model_keeps_serving(server, reference):
    prompt, params = FIXED[0]
    items = [inputs(tritonclient_grpc, "w5 w6", batched=False, gamma=99),
             inputs(tritonclient_grpc, "w5", batched=False, draft="nosuch"),
             inputs(tritonclient_grpc, prompt, batched=False, **params)]
    bad_gamma, bad_draft, good = grpc_stream(f"127.0.0.1:{server.grpc_port}", schema.STREAM_MODEL, items)
    assert "error: gamma must be an integer in 0..8 (got 99)" in str(bad_gamma), str(bad_gamma)
    assert "nosuch" in str(bad_draft) and "SpecdecError" not in str(bad_draft) + str(bad_gamma)
    assert "".join(p["text"] for p in good) == reference.generate(prompt, **params).text


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.status, resp.read().decode()


def test_health_readiness_and_metrics_endpoints(server, http):
    base = f"http://127.0.0.1:{server.http_port}"
    assert _get(f"{base}/v2/health/live")[0] == 200
    assert _get(f"{base}/v2/health/ready")[0] == 200
    for model in (schema.MODEL, schema.STREAM_MODEL):
        assert _get(f"{base}/v2/models/{model}/ready")[0] == 200
    http.infer(schema.MODEL, inputs(tritonclient_http, "w5 w6", max_new_tokens=2))
    status, metrics = _get(f"http://127.0.0.1:{server.metrics_port}/metrics")
    lines = [line for line in metrics.splitlines()
             if line.startswith("nv_inference_request_success") and f'model="{schema.MODEL}"' in line]
    assert status == 200 and lines and float(lines[0].rsplit(" ", 1)[1]) >= 1, metrics[:2000]


def test_http_generate_stream_sse_endpoint(server, reference):
    """Triton's HTTP generate_stream endpoint (server-sent events) on the decoupled model; tritonclient.http refuses
    decoupled models, so this is plain HTTP."""
    prompt, params = FIXED[0]
    body = json.dumps({"prompt": prompt, **params}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{server.http_port}/v2/models/{schema.STREAM_MODEL}/"
                                 "generate_stream", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        events = [json.loads(line[len("data: "):]) for line in resp.read().decode().splitlines()
                  if line.startswith("data: ")]
    texts = [e["text"] for e in events if "text" in e]
    assert len(texts) > 1 and "".join(texts) == reference.generate(prompt, **params).text, events


@pytest.fixture(scope="module")
def long_export(tiny_pair, tmp_path_factory):
    """The tiny pair exported with room for long requests (max_length 1024), for a stream that is still running when
    its client cancels it."""
    from tinymodels import run_export_cli

    out = tmp_path_factory.mktemp("long_export") / "export"
    code, stdout, stderr = run_export_cli(["--target", tiny_pair[0], "--draft", tiny_pair[1], "--export", out,
                                           "--gamma-max", "8", "--max-length", "1024"])
    assert code == 0, stderr
    return out


LONG = 900      # new tokens of the stream that is cancelled


def test_written_model_repository_runs_on_a_standalone_tritonserver(server, http, long_export, tmp_path):
    """`specdec-serve --write-model-repository` output on the tritonserver binary started directly (Python backend,
    no PyTriton): Triton parses both config.pbtxt files into the same inputs and outputs PyTriton declares, and the
    models answer as the Python API does; a bad request is the runtime's one-line message; a stream whose client
    cancels it after its first piece reaches specdec (model.py logs how many pieces it sent, far fewer than the
    request's) and the stream model goes on serving. Then SIGTERM stops it cleanly (triton_standalone.stop): every
    stub ends without a signal, having unloaded its model before the exit timeout; a failed request's garbage freed
    only at the stub's exit once crashed it (SIGSEGV), and a cancelled stream without its final flag kept its model
    from unloading."""
    import re
    import subprocess
    import sys
    import time

    import triton_standalone
    from triton_clients import grpc_stream_cancelled

    reference = SpeculativeDecoder.load(long_export, provider="cpu")
    long_prompt = next(p for p in ("w5 w6 w7", "w9 w3", "w12 w30 w2", "w7") if reference.generate(
        p, max_new_tokens=LONG, draft="none").stop_reason == "max_new_tokens")
    repo = tmp_path / "repo"
    code = subprocess.run([sys.executable, "-m", "specdec.serve.cli", "--export", str(long_export),
                           "--write-model-repository", str(repo), "--threads", "1"], capture_output=True, text=True,
                          timeout=120)
    assert code.returncode == 0, code.stderr
    ports = free_ports(3)
    with triton_standalone.serving(repo, tmp_path, ports):
        client = tritonclient_http.InferenceServerClient(f"127.0.0.1:{ports[0]}")
        try:
            for model in (schema.MODEL, schema.STREAM_MODEL):
                mine, theirs = client.get_model_config(model), http.get_model_config(model)
                assert mine["backend"] == "python" and mine["instance_group"][0]["count"] == 1
                for key in ("input", "output", "max_batch_size"):
                    assert mine[key] == theirs[key], (model, key)
            assert client.get_model_config(schema.STREAM_MODEL)["model_transaction_policy"]["decoupled"] is True
            for prompt, params in FIXED:
                want = expected(reference, prompt, params, counts=(prompt, params) in ALONE)
                assert _only(served(client, tritonclient_http, prompt, params), want) == want
            with pytest.raises(tritonclient_http.InferenceServerException) as err:
                client.infer(schema.MODEL, inputs(tritonclient_http, "w5", gamma=99))
            assert err.value.message() == ("gamma must be an integer in 0..8 (got 99); use 0 <= gamma <= 8, or "
                                           "re-export with --gamma-max 99.")
        finally:
            client.close()
        sent = grpc_stream_cancelled(f"127.0.0.1:{ports[1]}", schema.STREAM_MODEL, inputs(
            tritonclient_grpc, long_prompt, batched=False, max_new_tokens=LONG, draft="none", gamma=0))
        log, found, end = tmp_path / "tritonserver.log", None, time.monotonic() + 60
        while found is None and time.monotonic() < end:
            found = re.search(r"a request cancelled by its client after (\d+) pieces", log.read_text())
            time.sleep(0.2)
        assert found, log.read_text()[-2000:]
        assert sent <= LONG and int(found.group(1)) < LONG - 100, (sent, found.group(0))
        prompt, params = FIXED[0]
        bad, pieces = grpc_stream(f"127.0.0.1:{ports[1]}", schema.STREAM_MODEL,
                                  [inputs(tritonclient_grpc, "w5", batched=False, draft="nosuch"),
                                   inputs(tritonclient_grpc, prompt, batched=False, **params)])
        assert "nosuch" in str(bad)
        assert [p["text"] for p in pieces] == [p.text for p in reference.stream(prompt, **params)]


def test_load_benchmark_cell(server, reference):
    """benchmarks/serve_load.py's cell on this server: every request answered, in prompt order, sane numbers."""
    from specdec.bench.serve_load import run_cell

    prompts = [f"w{3 + i} w{9 + i} w{5 + 2 * i}" for i in range(6)]
    cell = run_cell(server.grpc_port, "grpc", 3, prompts, 5)
    assert cell["answers"] == [reference.generate(p, max_new_tokens=5).text for p in prompts]
    assert cell["requests"] == 6 and 0 < cell["p50_ms"] <= cell["p99_ms"] and cell["requests_per_s"] > 0


def test_load_benchmark_soak_measures_specdec_serve_in_its_own_process(tiny_export):
    """benchmarks/serve_load.py's --soak: the real `specdec-serve` command in a process of its own answers the
    requests, the memory reported is that process's with its tritonserver, and the server is stopped after."""
    import argparse
    import os

    from specdec.bench.serve_load import run_soak

    args = argparse.Namespace(engine=tiny_export, threads=1, max_batch=4, queue_delay_us=100, protocol="http",
                              warmup=2, soak=40, max_new_tokens=5)
    prompts = [f"w{3 + i} w{9 + i}" for i in range(8)]
    out = run_soak(args, 1, prompts)
    assert [entry["requests"] for entry in out] == [40]
    memory = out[0]["server_memory"]
    assert memory["with_children_mib"] > memory["process_mib"] > 50

    def serving(pid: str) -> bool:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            return False
        return b"specdec.serve.cli" in argv and str(tiny_export).encode() in argv

    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and serving(pid)]
