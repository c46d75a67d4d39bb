"""The speech family's serving (a Whisper export): its inputs (`audio`, language, task, timestamps, and the same
parameters as a text export's), its request's source (a Speech), its outputs (a text export's and `segments_json`)
and the reading of its requests. Its description, SPEECH, joins schema.SERVINGS when specdec.serve is imported."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from specdec.runtime.core.errors import SpecdecError

from . import schema
from .schema import INPUTS, OUTPUTS, PARAMETER_INPUTS, Field

# The inputs: `audio` (one variable-length FP32 tensor, shape [samples]), the optional language, task and timestamps
# (BOOL), and the same parameters. `prompt` stays declared (optional) so that text sent to a Whisper server gets the
# one-line error saying what to send instead of Triton's "unexpected input"; sent empty it is ignored.
SPEECH_INPUTS = (
    Field("audio", np.float32, (-1,), True,
          "16 kHz mono PCM samples in [-1, 1]; longer than the export's audio window: transcribed window by window "
          "(at most 4 h)"),
    Field("language", np.object_, (1,), True, 'a language code ("en" or "<|en|>"); absent or empty: detected'),
    Field("task", np.object_, (1,), True, '"transcribe" (absent or empty) or "translate"'),
    Field("timestamps", np.bool_, (1,), True,
          "true: segments with start and end times in segments_json (a model with timestamp tokens); absent: false"),
    replace(INPUTS[0], optional=True, doc="absent or empty (a Whisper export transcribes audio)"),
) + PARAMETER_INPUTS

# The outputs add the transcript's segments, as one JSON text (like stats_json: a row of a batch has one value
# whatever its number of segments). specdec: all of them; specdec_stream: the segments this response completes (a
# window's for audio longer than the window, all of them on the last piece of shorter audio), so the concatenation
# of a stream's lists is the request's list.
SEGMENTS = Field("segments_json", np.object_, (1,),
                 doc='with timestamps: [{"start": s, "end": s or null, "text": ..., "token_ids": [...]}, ...] '
                     "(stream: this response's); else []")
SPEECH_OUTPUTS = OUTPUTS + (SEGMENTS,)


@dataclass(frozen=True)
class Speech:
    """A Whisper request's audio (as sent: the decoder checks it), its language and task (None: the default) and
    whether it asks for timestamps."""
    audio: np.ndarray
    language: str | None = None
    task: str | None = None
    timestamps: bool = False

    def keywords(self) -> dict:
        """SpeculativeDecoder.generate()/stream() keywords of the request's source."""
        return {"audio": self.audio, "language": self.language, "task": self.task, "timestamps": self.timestamps}


SEND_AUDIO = "send 16 kHz mono PCM as an FP32 tensor named 'audio' (shape [samples])"


def _speech(get) -> Speech:
    """A Whisper request's Speech: its audio as a numpy array (never a path: the decoder reads a str as a WAV file's
    name), the prompt absent or empty, language and task absent or empty meaning the default."""
    prompt = get("prompt")
    text = "" if prompt is None else schema.text_value("prompt", prompt)
    if text.strip():
        raise SpecdecError("this is a Whisper export: it transcribes audio, not a text prompt",
                           f"{SEND_AUDIO}, and leave out 'prompt'")
    audio = get("audio")
    if audio is None:
        raise SpecdecError("the request has no 'audio' input", SEND_AUDIO)
    words = {}
    for name in ("language", "task"):
        raw = get(name)
        words[name] = None if raw is None else (schema.text_value(name, raw).strip() or None)
    stamps = get("timestamps")
    return Speech(np.asarray(audio), **words, timestamps=False if stamps is None else _flag("timestamps", stamps))


def _flag(name: str, array) -> bool:
    """A BOOL input's value (an integer 0 or 1 is taken too, as a stand-alone caller may send one)."""
    array = np.asarray(array)
    if array.size != 1:
        raise SpecdecError(f"input {name!r} must hold one value (got shape {list(array.shape)})", "send shape [1]")
    value = array.reshape(-1)[0]
    value = value.item() if isinstance(value, np.generic) else value
    if isinstance(value, int) and value in (0, 1):      # bool is an int
        return bool(value)
    raise SpecdecError(f"input {name!r} must be true or false (got {value!r})", "send a BOOL tensor of shape [1]")


def segments_json(segments) -> list:
    """Segments as the JSON values of segments_json: Segment(start, end, text, token_ids) objects (the runtime's) or
    such dicts."""
    def one(s):
        s = s if isinstance(s, dict) else {"start": s.start, "end": s.end, "text": s.text, "token_ids": s.token_ids}
        return {"start": s["start"], "end": s["end"], "text": s["text"], "token_ids": [int(t) for t in s["token_ids"]]}
    return [one(s) for s in segments]


def _segments(output) -> dict:
    """The segments of a Result or Piece (a failed row's, None: none) as response() keywords."""
    return {"segments": [] if output is None else segments_json(output.segments)}


# the rows of a batched request are counted on `audio`, or on `prompt` when a request sends no audio (its error
# then names the missing input on every row)
SPEECH = schema.Serving(keywords=("audio", "language", "task", "timestamps"), inputs=SPEECH_INPUTS,
                        outputs=SPEECH_OUTPUTS, read=_speech, given=Speech.keywords, counted=("audio", "prompt"),
                        extra=_segments)
schema.serve_family(SPEECH)
