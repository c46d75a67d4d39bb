"""specdec-serve on a Whisper export (a tiny random pair with a 1-second window and no timestamp tokens): the models
declare the audio inputs (FP32 `audio`, `language`, `task`, BOOL `timestamps`) and the `segments_json` output, and
audio sent over HTTP and gRPC comes back as the Python API's generate() on the same samples (greedy with the auto
choice, a fixed language and task, the detected language, sampled at T = 1 with a fixed seed, and audio longer than
two windows); a request of two rows answers each; a stream's pieces are the Python API's; bad audio and bad
requests (timestamps asked of this model included) are the runtime's one-line errors and the server goes on serving.
The same on a written model repository run by a stand-alone tritonserver. Timestamps on a model that has them:
test_serve_timestamps.py."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pytriton")
tritonclient_http = pytest.importorskip("tritonclient.http")
tritonclient_grpc = pytest.importorskip("tritonclient.grpc")

from specdec.runtime import SpecdecError  # noqa: E402
from specdec.serve import schema  # noqa: E402
from specdec.serve.speech import SPEECH_INPUTS, SPEECH_OUTPUTS  # noqa: E402
from specdec.serve.server import free_ports  # noqa: E402

from tinymodels import whisper_audio  # noqa: E402
from triton_clients import as_dict, grpc_stream, inputs  # noqa: E402

MAX_NEW = 12
WAVES = [whisper_audio(0.8, seed=1), whisper_audio(1.0, seed=2), whisper_audio(2.5, seed=3)]
# (wave, parameters): greedy with the auto choice; a language and task given, the language detected, the language
# as its token; sampled at T = 1 with a seed; audio longer than two windows (window by window, cut at quiet points:
# this model has no timestamp tokens). With a fixed draft source and gamma every count is deterministic (a Whisper
# request runs alone), so the counts are compared too.
CASES = [
    (0, {}),
    (1, {"language": "de", "task": "translate", "draft": "draft", "gamma": 3}),
    (0, {"draft": "draft", "gamma": 2}),
    (1, {"language": "<|en|>", "draft": "lookup", "gamma": 2}),
    (0, {"language": "en", "temperature": 1.0, "seed": 5, "draft": "draft", "gamma": 3}),
    (2, {"language": "en", "draft": "draft", "gamma": 2}),
]


@pytest.fixture(scope="module")
def export(whisper_pair):
    """exported_whisper_pair's default export, built once per run (tests/conftest.py)."""
    return whisper_pair[1] / "export"


@pytest.fixture(scope="module")
def served_export(export):
    return export


def expected(dec, wave, params, counts: bool) -> dict:
    res = dec.generate(audio=WAVES[wave], max_new_tokens=MAX_NEW, **params)
    out = {"text": res.text, "token_ids": res.token_ids, "stop_reason": res.stop_reason, "error": "",
           "segments": segment_dicts(res.segments)}
    if counts:
        out.update(new_tokens=res.stats.new_tokens, target_calls=res.stats.target_calls,
                   draft_calls=res.stats.draft_calls, proposed=res.stats.proposed, accepted=res.stats.accepted)
    return out


def segment_dicts(segments) -> list:
    """Result.segments as segments_json has them."""
    return [{"start": s.start, "end": s.end, "text": s.text, "token_ids": list(s.token_ids)} for s in segments]


def served(client, module, model=schema.MODEL, **values) -> dict:
    return as_dict(client.infer(model, inputs(module, max_new_tokens=MAX_NEW, **values)))


def refused(client, module, **values) -> str:
    with pytest.raises(module.InferenceServerException) as err:
        client.infer(schema.MODEL, inputs(module, max_new_tokens=MAX_NEW, **values))
    return err.value.message()


def one_line(reference, **kwargs) -> str:
    """The runtime's one-line message for generate(**kwargs)."""
    with pytest.raises(SpecdecError) as err:
        reference.generate(max_new_tokens=MAX_NEW, **kwargs)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_both_models_declare_the_audio_inputs(http):
    for model in (schema.MODEL, schema.STREAM_MODEL):
        config = http.get_model_config(model)
        declared = {i["name"]: i for i in config["input"]}
        assert list(declared) == [f.name for f in SPEECH_INPUTS], model
        assert declared["audio"]["data_type"] == "TYPE_FP32" and declared["audio"]["dims"] == [-1]
        assert declared["timestamps"]["data_type"] == "TYPE_BOOL" and declared["timestamps"]["dims"] == [1]
        assert all(declared[name]["optional"] for name in ("audio", "language", "task", "timestamps", "prompt"))
        assert [o["name"] for o in config["output"]] == [f.name for f in SPEECH_OUTPUTS], model
        assert config["output"][-1]["name"] == "segments_json" and config["output"][-1]["data_type"] == "TYPE_STRING"


@pytest.mark.parametrize("case", range(len(CASES)))
def test_audio_over_http_and_grpc_equals_the_python_api(http, grpc, reference, case):
    wave, params = CASES[case]
    want = expected(reference, wave, params, counts="draft" in params)
    assert want["token_ids"], "the reference generated nothing: the comparison would say little"
    for client, module in ((http, tritonclient_http), (grpc, tritonclient_grpc)):
        got = served(client, module, audio=WAVES[wave], **params)
        assert {key: got[key] for key in want} == want, module.__name__


def test_an_empty_prompt_beside_the_audio_is_ignored(http, reference):
    want = expected(reference, 0, {"language": "en"}, counts=False)
    got = served(http, tritonclient_http, prompt="", audio=WAVES[0], language="en", task="")
    assert {key: got[key] for key in want} == want


def test_a_request_of_two_rows_answers_each(http, reference):
    """Two clips of one length in one request ([2, samples]): each row is its own generate()."""
    pair = np.stack([WAVES[0], whisper_audio(0.8, seed=7)])
    want = [reference.generate(audio=row, max_new_tokens=MAX_NEW, language="en") for row in pair]
    audio = tritonclient_http.InferInput("audio", list(pair.shape), "FP32")
    audio.set_data_from_numpy(pair)
    language = tritonclient_http.InferInput("language", [2, 1], "BYTES")
    language.set_data_from_numpy(np.array([[b"en"], [b"en"]], dtype=np.object_))
    limit = tritonclient_http.InferInput("max_new_tokens", [2, 1], "INT64")
    limit.set_data_from_numpy(np.full((2, 1), MAX_NEW, np.int64))
    result = http.infer(schema.MODEL, [audio, language, limit])
    texts = [t.decode() for t in result.as_numpy("text").reshape(-1)]
    ids = [[int(t) for t in row if t >= 0] for row in result.as_numpy("token_ids")]
    assert texts == [r.text for r in want] and ids == [r.token_ids for r in want]


def test_a_grpc_stream_gives_the_python_apis_pieces(server, reference):
    params = {"language": "en", "draft": "draft", "gamma": 2, "max_new_tokens": MAX_NEW}
    bad, pieces = grpc_stream(f"127.0.0.1:{server.grpc_port}", schema.STREAM_MODEL,
                              [inputs(tritonclient_grpc, batched=False, audio=WAVES[0], language="xx"),
                               inputs(tritonclient_grpc, batched=False, audio=WAVES[0], **params)])
    assert one_line(reference, audio=WAVES[0], language="xx") in str(bad)
    want = list(reference.stream(audio=WAVES[0], **params))
    assert [p["text"] for p in pieces] == [p.text for p in want] and len(pieces) > 1
    assert sum((p["token_ids"] for p in pieces), []) == sum((p.token_ids for p in want), [])
    assert pieces[-1]["stop_reason"] == want[-1].stop_reason
    assert all(p["segments"] == [] for p in pieces)             # no timestamps asked for


def test_a_grpc_stream_of_audio_longer_than_the_window_gives_a_piece_per_window(server, reference):
    params = {"language": "en", "draft": "draft", "gamma": 2, "max_new_tokens": MAX_NEW}
    (pieces,) = grpc_stream(f"127.0.0.1:{server.grpc_port}", schema.STREAM_MODEL,
                            [inputs(tritonclient_grpc, batched=False, audio=WAVES[2], **params)])
    want = list(reference.stream(audio=WAVES[2], **params))
    assert len(want) > 2, "more than two windows"
    assert [(p["text"], p["token_ids"], p["stop_reason"]) for p in pieces] == \
        [(p.text, p.token_ids, p.stop_reason) for p in want]


# (what is sent, the generate() keywords whose one-line error the answer carries: None when Triton refuses the request
# before specdec sees it, a word of the answer). Empty audio is refused by PyTriton's proxy, which cannot pass a tensor
# with no elements on (its message is its own); the stand-alone repository answers it with the runtime's line.
BAD = [
    (dict(audio=np.full(160, np.nan, np.float32)), dict(audio=np.full(160, np.nan, np.float32)), "NaN"),
    (dict(audio=WAVES[0], timestamps=True), dict(audio=WAVES[0], timestamps=True), "no timestamp tokens"),
    (dict(audio=WAVES[0], timestamps=1, dtypes={"timestamps": "INT64"}), None, "BOOL"),
    (dict(audio=WAVES[0], language="xx"), dict(audio=WAVES[0], language="xx"), "'xx'"),
    (dict(audio=WAVES[0], task="summarize"), dict(audio=WAVES[0], task="summarize"), "'summarize'"),
    (dict(audio=np.zeros(0, np.float32)), None, ""),
    (dict(audio=WAVES[0], dtypes={"audio": "FP64"}), None, "FP64"),
]
TEXT = [  # sent to a Whisper export, with the server's one-line message
    (dict(prompt="w10 w11"), "this is a Whisper export: it transcribes audio, not a text prompt"),
    (dict(prompt="w10", audio=WAVES[0]), "this is a Whisper export: it transcribes audio, not a text prompt"),
    (dict(language="en"), "the request has no 'audio' input"),
]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bad_requests_are_one_line_errors_and_the_server_keeps_serving(http, grpc, reference, protocol):
    client, module = (http, tritonclient_http) if protocol == "http" else (grpc, tritonclient_grpc)
    want = expected(reference, 1, {"language": "en", "draft": "draft", "gamma": 2}, counts=True)
    for sent, runtime, needle in BAD:
        message = refused(client, module, **sent)
        assert needle in message, (needle, message)
        if runtime is not None:
            assert one_line(reference, **runtime) in message
        got = served(client, module, audio=WAVES[1], language="en", draft="draft", gamma=2)
        assert {key: got[key] for key in want} == want, f"after {needle}"
    for sent, line in TEXT:
        assert line in refused(client, module, **sent)
    assert "FP32" in refused(client, module, audio=WAVES[0], dtypes={"audio": "FP64"})


def test_a_bad_row_beside_a_good_one_fails_alone(http, reference):
    rows = np.stack([WAVES[1], np.full(WAVES[1].size, np.nan, np.float32)])
    audio = tritonclient_http.InferInput("audio", list(rows.shape), "FP32")
    audio.set_data_from_numpy(rows)
    result = http.infer(schema.MODEL, [audio])          # max_new_tokens absent: the runtime's default
    want = reference.generate(audio=rows[0])
    errors = [e.decode() for e in result.as_numpy("error").reshape(-1)]
    stops = [s.decode() for s in result.as_numpy("stop_reason").reshape(-1)]
    assert errors == ["", one_line(reference, audio=rows[1])] and stops == [want.stop_reason, "error"]
    assert result.as_numpy("text")[0, 0].decode() == want.text


def test_written_model_repository_transcribes_on_a_standalone_tritonserver(http, export, reference, tmp_path):
    """The repository written for the Whisper export on the tritonserver binary (Python backend, no PyTriton):
    the same inputs as the PyTriton server's, audio answered as generate() answers it, a bad request (empty audio
    included) is exactly the runtime's one line, a stream gives the Python API's pieces; SIGTERM stops the server
    and its stubs cleanly (triton_standalone.stop: a failed request's garbage, freed only at a stub's exit, once
    crashed it)."""
    import triton_standalone

    from specdec.serve.repository import write_model_repository

    repo = write_model_repository(tmp_path / "repo", export, threads=1)
    ports = free_ports(3)
    with triton_standalone.serving(repo, tmp_path, ports):
        client = tritonclient_http.InferenceServerClient(f"127.0.0.1:{ports[0]}")
        try:
            for model in (schema.MODEL, schema.STREAM_MODEL):
                for key in ("input", "output"):
                    assert client.get_model_config(model)[key] == http.get_model_config(model)[key], (model, key)
            wave, params = CASES[1]
            want = expected(reference, wave, params, counts=True)
            got = served(client, tritonclient_http, audio=WAVES[wave], **params)
            assert {key: got[key] for key in want} == want
            for bad in (dict(audio=WAVES[0], language="xx"), dict(audio=np.zeros(0, np.float32)),
                        dict(audio=WAVES[0], timestamps=True)):
                assert refused(client, tritonclient_http, **bad) == one_line(reference, **bad)
        finally:
            client.close()
        params = {"language": "de", "draft": "draft", "gamma": 3, "max_new_tokens": MAX_NEW}
        (pieces,) = grpc_stream(f"127.0.0.1:{ports[1]}", schema.STREAM_MODEL,
                                [inputs(tritonclient_grpc, batched=False, audio=WAVES[1], **params)])
        assert [p["text"] for p in pieces] == [p.text for p in reference.stream(audio=WAVES[1], **params)]
