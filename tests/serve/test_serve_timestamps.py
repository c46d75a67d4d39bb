"""specdec-serve's timestamps on a Whisper export that has timestamp tokens (tinymodels' stamped pair, a 1-second
window): with the `timestamps` input true, `segments_json` holds generate(audio=..., timestamps=True)'s segments
(start, end, text, token ids), over HTTP and gRPC, for audio within the window and audio longer than two windows; on
`specdec_stream` every response carries the segments it completes (a window's for long audio, all of them on the
last response of short audio), so the concatenation is generate()'s list; without `timestamps` there are none; a
bad `timestamps` value is a one-line error (Triton's refusal of another dtype, specdec's of a value that is not true
or false) and the server goes on serving."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("pytriton")
tritonclient_http = pytest.importorskip("tritonclient.http")
tritonclient_grpc = pytest.importorskip("tritonclient.grpc")

from specdec.runtime import SpecdecError  # noqa: E402
from specdec.serve import schema  # noqa: E402
from specdec.serve.speech import SPEECH  # noqa: E402

from tinymodels import exported_stamped_whisper_pair, whisper_audio  # noqa: E402
from triton_clients import as_dict, grpc_stream, inputs  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore:You are using the legacy TorchScript-based ONNX export"),
              pytest.mark.filterwarnings("ignore:The feature will be removed:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")]

MAX_NEW = 10
SHORT = whisper_audio(0.8, seed=1)
LONG = np.concatenate([whisper_audio(0.9, seed=s) for s in range(3)])     # 2.7 s: three 1 s windows or more
WAVES = {"short": SHORT, "long": LONG}
# greedy with the default draft choice, and with the draft model at a fixed gamma (every count deterministic)
PARAMS = [{"language": "en"}, {"language": "en", "draft": "draft", "gamma": 3}]


@pytest.fixture(scope="module")
def served_export(tmp_path_factory):
    return exported_stamped_whisper_pair(tmp_path_factory.mktemp("stamped"))[1]


def segment_dicts(segments) -> list:
    """Result.segments as segments_json has them."""
    return [{"start": s.start, "end": s.end, "text": s.text, "token_ids": list(s.token_ids)} for s in segments]


def expected(dec, wave: str, params: dict) -> dict:
    res = dec.generate(audio=WAVES[wave], max_new_tokens=MAX_NEW, timestamps=True, **params)
    return {"text": res.text, "token_ids": res.token_ids, "stop_reason": res.stop_reason, "error": "",
            "segments": segment_dicts(res.segments)}


def served(client, module, model=schema.MODEL, **values) -> dict:
    return as_dict(client.infer(model, inputs(module, max_new_tokens=MAX_NEW, **values)))


@pytest.mark.parametrize("wave", ["short", "long"])
@pytest.mark.parametrize("case", range(len(PARAMS)))
def test_segments_over_http_and_grpc_equal_the_python_api(http, grpc, reference, wave, case):
    want = expected(reference, wave, PARAMS[case])
    assert any(s["text"] for s in want["segments"]), "no segments: the comparison says little"
    if wave == "long":
        assert want["segments"][-1]["start"] >= 1.0, "segments from more than one window"
    for client, module in ((http, tritonclient_http), (grpc, tritonclient_grpc)):
        got = served(client, module, audio=WAVES[wave], timestamps=True, **PARAMS[case])
        assert {key: got[key] for key in want} == want, module.__name__


def test_without_timestamps_there_are_no_segments(http, reference):
    for wave in WAVES:
        res = reference.generate(audio=WAVES[wave], max_new_tokens=MAX_NEW, language="en")
        for sent in ({}, {"timestamps": False}):
            got = served(http, tritonclient_http, audio=WAVES[wave], language="en", **sent)
            assert (got["token_ids"], got["text"], got["segments"]) == (res.token_ids, res.text, []), (wave, sent)


def test_a_request_of_two_rows_gives_each_its_segments(http, reference):
    pair = np.stack([SHORT, whisper_audio(0.8, seed=7)])
    want = [segment_dicts(reference.generate(audio=row, max_new_tokens=MAX_NEW, language="en",
                                             timestamps=True).segments) for row in pair]
    audio = tritonclient_http.InferInput("audio", list(pair.shape), "FP32")
    audio.set_data_from_numpy(pair)
    stamps = tritonclient_http.InferInput("timestamps", [2, 1], "BOOL")
    stamps.set_data_from_numpy(np.ones((2, 1), np.bool_))
    language = tritonclient_http.InferInput("language", [2, 1], "BYTES")
    language.set_data_from_numpy(np.array([[b"en"], [b"en"]], dtype=np.object_))
    limit = tritonclient_http.InferInput("max_new_tokens", [2, 1], "INT64")
    limit.set_data_from_numpy(np.full((2, 1), MAX_NEW, np.int64))
    result = http.infer(schema.MODEL, [audio, stamps, language, limit])
    assert [json.loads(row) for row in result.as_numpy("segments_json").reshape(-1)] == want


@pytest.mark.parametrize("wave", ["short", "long"])
def test_a_grpc_stream_carries_each_pieces_segments(server, reference, wave):
    params = {"language": "en", "draft": "draft", "gamma": 3, "max_new_tokens": MAX_NEW}
    (pieces,) = grpc_stream(f"127.0.0.1:{server.grpc_port}", schema.STREAM_MODEL,
                            [inputs(tritonclient_grpc, batched=False, audio=WAVES[wave], timestamps=True, **params)])
    whole = segment_dicts(reference.generate(audio=WAVES[wave], timestamps=True, **params).segments)
    python = list(reference.stream(audio=WAVES[wave], timestamps=True, **params))
    assert [(p["text"], p["token_ids"], p["stop_reason"]) for p in pieces] == \
        [(p.text, p.token_ids, p.stop_reason) for p in python]
    assert sum((p["segments"] for p in pieces), []) == whole and whole
    if wave == "long":      # a response per window, each with that window's segments, as stream() yields them
        assert [p["segments"] for p in pieces] == [segment_dicts(p.segments) for p in python]
        assert sum(bool(p["segments"]) for p in pieces) > 1
    else:                   # the pieces have none; the last response carries them all
        assert all(p["segments"] == [] for p in pieces[:-1]) and pieces[-1]["segments"] == whole


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_bad_timestamps_value_is_refused_and_the_server_keeps_serving(http, grpc, reference, protocol):
    client, module = (http, tritonclient_http) if protocol == "http" else (grpc, tritonclient_grpc)
    want = expected(reference, "short", PARAMS[1])
    for sent, needle in ((dict(timestamps=1, dtypes={"timestamps": "INT64"}), "BOOL"),
                         (dict(timestamps="yes", dtypes={"timestamps": "BYTES"}), "BOOL"),
                         (dict(timestamps=True, language="xx"), "'xx'")):
        with pytest.raises(module.InferenceServerException) as err:
            client.infer(schema.MODEL, inputs(module, audio=SHORT, max_new_tokens=MAX_NEW, **sent))
        assert needle in err.value.message(), (sent, err.value.message())
        got = served(client, module, audio=SHORT, timestamps=True, **PARAMS[1])
        assert {key: got[key] for key in want} == want, f"after {sent}"


@pytest.mark.parametrize("value,line", [
    (np.array([2], np.int64), "input 'timestamps' must be true or false (got 2); send a BOOL tensor of shape [1]."),
    (np.array([True, False]), "input 'timestamps' must hold one value (got shape [2]); send shape [1]."),
    (np.array([b"true"], np.object_), "input 'timestamps' must be true or false (got b'true'); send a BOOL tensor"),
], ids=["two", "two values", "text"])
def test_the_schema_refuses_a_timestamps_value_that_is_not_true_or_false(value, line):
    """What reaches specdec past Triton's checks (a stand-alone caller of the handler): the one-line error."""
    sent = {"audio": SHORT, "timestamps": value}
    with pytest.raises(SpecdecError) as err:
        schema.request(sent.get, SPEECH)
    assert str(err.value).startswith(line) and "\n" not in str(err.value)
    for flag, want in ((np.array([True]), True), (np.array([0], np.int32), False), (None, False)):
        source, _ = schema.request({"audio": SHORT, "timestamps": flag}.get, SPEECH)
        assert source.timestamps is want
