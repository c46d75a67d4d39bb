"""Synthesized speech for the speech pair's recipe: espeak-ng (the library and its data from PyPI's espeakng-loader
wheel, so nothing outside the registries is needed) turns a sentence into 16 kHz mono samples, with the time at which
espeak-ng starts each word (its word events), to measure timestamps against.

    voice = Voice("en-us", rate=160, pitch=50)          # words per minute, pitch 0..99
    speech = synthesize("the package installs a daemon", voice)
    speech.pcm            # float32 samples in [-1, 1] at 16 kHz
    speech.words          # [(start_s, word), ...] in order

Several voices and speeds keep a model from learning one timing (VOICES, SPEEDS; HELD_OUT is evaluated apart). One process holds one espeak-ng engine
(the library keeps global state), so `synthesize` takes a lock; call it from one thread per process.

Reproducible: espeak-ng's random numbers (some voice variants, such as en-us+f3, draw them; the library seeds them
from the clock) are seeded from the sentence and the voice before each sentence, so a process that synthesizes the
same sentences in the same order gets the same samples. The samples still depend on what the process synthesized
before (the library's waveform state carries over, and espeak_Terminate with a new espeak_Initialize does not reset
it), so the same sentence twice in one process differs slightly; speech-data therefore makes each shard in a process
of its own.
"""

from __future__ import annotations

import ctypes
import threading
import zlib
from dataclasses import dataclass, field

import numpy as np

from specdec.runtime.core.errors import SpecdecError

RATE = 16_000                  # what Whisper's feature extractor takes
# espeak-ng voices that sound different (accent, speaker variant), each at several speeds (words per minute); one
# voice and one speed stay out of training, to be evaluated apart
VOICES = ("en-us", "en", "en-gb-scotland", "en-029", "en-us-nyc", "en-gb-x-gbclan", "en-us+f3", "en-gb-x-rp+m3")
SPEEDS = (135, 160, 185)
HELD_OUT = ("en-gb-x-gbcwmd", 210)

# speak_lib.h
_SYNCHRONOUS = 2               # espeak_AUDIO_OUTPUT: AUDIO_OUTPUT_SYNCHRONOUS
_DONT_EXIT = 0x8000            # espeakINITIALIZE_DONT_EXIT
_CHARS_UTF8, _POS_CHARACTER = 1, 1
_RATE, _PITCH = 1, 3           # espeak_PARAMETER
_EVENT_WORD, _EVENT_END = 1, 0


class _Event(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("unique_identifier", ctypes.c_uint), ("text_position", ctypes.c_int),
                ("length", ctypes.c_int), ("audio_position", ctypes.c_int), ("sample", ctypes.c_int),
                ("user_data", ctypes.c_void_p), ("id", ctypes.c_char * 8)]


_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(_Event))


@dataclass(frozen=True)
class Voice:
    name: str = "en-us"        # an espeak-ng voice, optionally with a variant: "en-us+m3"
    rate: int = 160            # words per minute (80 .. 450)
    pitch: int = 50            # 0 .. 99


@dataclass
class Speech:
    pcm: np.ndarray                                    # float32, RATE Hz, mono
    words: list = field(default_factory=list)          # (start seconds, word) in order

    @property
    def seconds(self) -> float:
        return self.pcm.size / RATE


class _Engine:
    """The process's espeak-ng library, initialized once (its native rate is in `rate`)."""

    def __init__(self):
        try:
            import espeakng_loader
        except ImportError:
            raise SpecdecError("speech synthesis needs the espeakng-loader package (espeak-ng's library and data)",
                               'pip install -e ".[models]"') from None
        self.lib = ctypes.CDLL(espeakng_loader.get_library_path())
        self.lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        self.lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        self.lib.espeak_Synth.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int, ctypes.c_uint,
                                          ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
        data = espeakng_loader.get_data_path().encode()
        self.rate = self.lib.espeak_Initialize(_SYNCHRONOUS, 0, data, _DONT_EXIT)
        if self.rate <= 0:
            raise SpecdecError(f"espeak-ng did not start with its data at {data.decode()}",
                               "reinstall espeakng-loader")
        self.seed = getattr(self.lib, "espeak_ng_SetRandSeed", None)       # espeak-ng 1.51 and later
        if self.seed is not None:
            self.seed.argtypes, self.seed.restype = [ctypes.c_long], None
        self.chunks: list = []
        self.events: list = []
        self._keep = _CALLBACK(self._take)       # referenced for as long as the library may call it
        self.lib.espeak_SetSynthCallback(self._keep)

    def _take(self, wav, count, events) -> int:
        if count > 0:
            self.chunks.append(np.ctypeslib.as_array(wav, shape=(count,)).copy())
        i = 0
        while events[i].type != _EVENT_END:
            event = events[i]
            if event.type == _EVENT_WORD:
                self.events.append((event.audio_position / 1000.0, event.text_position, event.length))
            i += 1
        return 0                                  # go on synthesizing

    def say(self, text: str, voice: Voice) -> tuple:
        if self.lib.espeak_SetVoiceByName(voice.name.encode()) != 0:
            raise SpecdecError(f"espeak-ng has no voice {voice.name!r}", f"use one of {', '.join(VOICES)}")
        self.lib.espeak_SetParameter(_RATE, int(voice.rate), 0)
        self.lib.espeak_SetParameter(_PITCH, int(voice.pitch), 0)
        if self.seed is not None:             # the same random draws for the same sentence and voice
            self.seed(zlib.crc32(f"{voice.name}|{voice.rate}|{voice.pitch}|{text}".encode("utf-8")))
        self.chunks, self.events = [], []
        raw = text.encode("utf-8") + b"\0"
        if self.lib.espeak_Synth(raw, len(raw), 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None) != 0:
            raise SpecdecError(f"espeak-ng could not synthesize {text[:40]!r}", "check the text (UTF-8)")
        pcm = np.concatenate(self.chunks) if self.chunks else np.zeros(0, np.int16)
        return pcm, list(self.events)


_ENGINE: _Engine | None = None
_LOCK = threading.Lock()


def synthesize(text: str, voice: Voice = Voice()) -> Speech:
    """`text` spoken by `voice`: 16 kHz float32 samples and each word's start (espeak-ng's word events; a word's
    text position is 1-based in characters of `text`)."""
    global _ENGINE
    if not isinstance(text, str) or not text.strip():
        raise SpecdecError("nothing to synthesize: the text is empty", "pass a sentence")
    if not 80 <= voice.rate <= 450 or not 0 <= voice.pitch <= 99:
        raise SpecdecError(f"voice rate {voice.rate} or pitch {voice.pitch} out of range",
                           "use a rate of 80 .. 450 words per minute and a pitch of 0 .. 99")
    with _LOCK:
        if _ENGINE is None:
            _ENGINE = _Engine()
        raw, events = _ENGINE.say(text, voice)
        native = _ENGINE.rate
    pcm = resample(raw.astype(np.float32) / 32768.0, native, RATE)
    words = [(start, text[pos - 1:pos - 1 + length]) for start, pos, length in events]
    return Speech(pcm.astype(np.float32), words)


def resample(pcm: np.ndarray, source: int, target: int) -> np.ndarray:
    """`pcm` at `source` Hz -> `target` Hz (polyphase, with its anti-aliasing filter)."""
    if source == target:
        return pcm
    from math import gcd

    from scipy.signal import resample_poly

    g = gcd(source, target)
    return resample_poly(pcm, target // g, source // g).astype(np.float32)
