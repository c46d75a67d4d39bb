"""The Whisper calls of libspecdec (include/specdec.h, API versions 6 and 7): specdec_get_audio_info,
specdec_transcribe, specdec_transcribe_ids and specdec_transcribe_segments, as a mixin of bindings/_capi.py's CApi
(whose helpers they use: _session, _hold, _params, _out_buffer, _fill_stats, _give_ids, _give_text, _text, _too_small).

What C passes differently from Python is checked here, in C's words: which audio input was given (samples, or a WAV
file's path: exactly one), n_samples against the longest audio a request takes before the caller's buffer is read
(a length past the caller's buffer must never be read), non-finite samples, and segments asked of a model without
timestamp tokens. Everything else is SpeculativeDecoder.generate(audio=..., language=..., task=..., timestamps=...)'s:
it reads a WAV file with runtime/loading/audio.py, decodes audio longer than the window window by window, and refuses
an unknown language or task or a bad file in one line. Prompts sent to a Whisper session by the text calls are
refused by _takes_prompts, in C's words too.

A SpecdecError raised here becomes SPECDEC_E_INVALID_ARGUMENT with its one-line message (CApi._entry). CApi finds
this module by its name (_capi_<family>.py): its EXTERNS are attached with CApi's, bindings/build.py gives cffi its
CDEF, and CALLS is CApi's mixin.
"""

from __future__ import annotations

import numpy as np

from specdec.runtime import SpecdecError
from specdec.bindings._failure import Failure
from specdec.runtime.families.whisper.transcript import MAX_AUDIO_S

NO_AUDIO_FIX = "pass mono 16 kHz float samples (pcm and n_samples) or the path of a WAV file (wav_path)"

# extern "Python" functions: C name of the public entry point -> private name that cffi binds
EXTERNS = {
    "specdec_get_audio_info": "_specdec_py_get_audio_info",         # API version 6
    "specdec_transcribe": "_specdec_py_transcribe",
    "specdec_transcribe_ids": "_specdec_py_transcribe_ids",
    "specdec_transcribe_segments": "_specdec_py_transcribe_segments",   # API version 7
}

# their declarations for cffi (bindings/build.py adds them to its own; read there without importing this module)
CDEF = """
extern "Python" int _specdec_py_get_audio_info(specdec_session *, size_t *, int32_t *);
extern "Python" int _specdec_py_transcribe(specdec_session *, const float *, size_t, const char *, const char *,
                                           const char *, const specdec_params *, char *, size_t, size_t *,
                                           specdec_stats *);
extern "Python" int _specdec_py_transcribe_ids(specdec_session *, const float *, size_t, const char *, const char *,
                                               const char *, const specdec_params *, int32_t *, size_t, size_t *,
                                               specdec_stats *);
extern "Python" int _specdec_py_transcribe_segments(specdec_session *, const float *, size_t, const char *,
                                                    const char *, const char *, const specdec_params *, char *, size_t,
                                                    size_t *, double *, double *, size_t *, size_t, size_t *,
                                                    specdec_stats *);
"""


class AudioCalls:
    """specdec_get_audio_info, specdec_transcribe, _ids and _segments (a mixin of CApi)."""

    def get_audio_info(self, ptr, out_max_samples, out_sample_rate) -> None:
        session = self._session(ptr)
        with self._hold(session) as dec:
            speech = dec.manifest.speech
        window, rate = (int(speech["n_samples"]), int(speech["sampling_rate"])) if speech else (0, 0)
        if out_max_samples != self.ffi.NULL:
            out_max_samples[0] = window
        if out_sample_rate != self.ffi.NULL:
            out_sample_rate[0] = rate

    def transcribe(self, ptr, pcm, n_samples, wav_path, language, task, params, out_text, out_capacity, out_len,
                   out_stats) -> None:
        res = self._transcribed(ptr, pcm, n_samples, wav_path, language, task, params, out_text, out_capacity,
                                out_len, "out_text")
        self._fill_stats(out_stats, res.stats, res.stop_reason)
        self._give_text(res.text.encode("utf-8"), out_text, out_capacity, out_len)

    def transcribe_ids(self, ptr, pcm, n_samples, wav_path, language, task, params, out_ids, out_capacity, out_len,
                       out_stats) -> None:
        res = self._transcribed(ptr, pcm, n_samples, wav_path, language, task, params, out_ids, out_capacity,
                                out_len, "out_ids")
        self._give_ids(res, out_ids, out_capacity, out_len, out_stats)

    def transcribe_segments(self, ptr, pcm, n_samples, wav_path, language, task, params, out_text, out_capacity,
                            out_len, out_starts, out_ends, out_text_lengths, max_segments, out_count,
                            out_stats) -> None:
        """The Result's segments: texts NUL-separated into out_text (its length without the last NUL, as a single
        text's), times and lengths into the caller's arrays; a Segment's end None (the audio's end cut it) is NaN."""
        ffi = self.ffi
        self._session(ptr)                  # the checks in generate_sequences' order: session, out_len, out_count
        self._out_buffer(out_text, out_capacity, out_len, "out_text")
        if out_count == ffi.NULL:
            raise SpecdecError("out_count is NULL", "pass the address of a size_t to receive the number of segments")
        arrays = {"out_starts": out_starts, "out_ends": out_ends, "out_text_lengths": out_text_lengths}
        for name, array in arrays.items():
            if array == ffi.NULL and max_segments:
                raise SpecdecError(f"{name} is NULL but max_segments is {max_segments}",
                                   "pass arrays of max_segments elements, or max_segments 0 to measure only")
        res = self._transcribed(ptr, pcm, n_samples, wav_path, language, task, params, out_text, out_capacity,
                                out_len, "out_text", timestamps=True)
        texts = [s.text.encode("utf-8") for s in res.segments]
        data = b"\0".join(texts)
        out_len[0], out_count[0] = len(data), len(texts)
        self._fill_stats(out_stats, res.stats, res.stop_reason)
        if len(texts) > max_segments:
            count = f"{len(texts)} segment" + ("s" if len(texts) != 1 else "")
            raise Failure(self.lib.SPECDEC_E_BUFFER_TOO_SMALL, f"the transcript has {count} but max_segments is "
                          f"{max_segments}", f"call again with max_segments >= {len(texts)} (same params and seed "
                          "give the same segments)")
        if len(data) + 1 > out_capacity:
            raise self._too_small(out_capacity, len(data) + 1, "bytes (every segment's text with its NUL)")
        ffi.memmove(out_text, data + b"\0", len(data) + 1)
        out_starts[0:len(texts)] = [float(s.start) for s in res.segments]
        out_ends[0:len(texts)] = [float("nan") if s.end is None else float(s.end) for s in res.segments]
        out_text_lengths[0:len(texts)] = [len(t) for t in texts]

    # -- helpers ----------------------------------------------------------------------------------------------
    def _transcribed(self, ptr, pcm, n_samples, wav_path, language, task, params, out, out_capacity, out_len,
                     what: str, timestamps: bool = False):
        """The Result of one request: its arguments checked, the session held while its samples are read and
        the runtime generates (with timestamps: the Result's segments)."""
        ffi = self.ffi
        session = self._session(ptr)
        self._out_buffer(out, out_capacity, out_len, what)
        path = self._audio_input(pcm, n_samples, wav_path)
        lang = None if language == ffi.NULL else self._text(language, "language")
        kind = None if task == ffi.NULL else self._text(task, "task")
        request = self._params(params)
        with self._hold(session) as dec:
            speech = dec.manifest.speech
            if speech is None:
                raise SpecdecError("this export is a text model: it takes a prompt, not audio",
                                   "use specdec_generate_text or specdec_generate_ids, or open a Whisper export")
            if timestamps and speech.get("timestamps") is None:
                raise SpecdecError("this Whisper model has no timestamp tokens, so its transcript has no segment "
                                   "times", "use specdec_transcribe for its text, or export a checkpoint with "
                                   "timestamp tokens (the official Whisper checkpoints have them)")
            audio = path if path is not None else self._samples(pcm, n_samples, speech)
            return dec.generate(audio=audio, language=lang, task=kind, params=request, timestamps=timestamps)

    def _audio_input(self, pcm, n_samples: int, wav_path):
        """The WAV path (str) when that is the input, None when it is the samples; exactly one must be given."""
        if wav_path != self.ffi.NULL:
            if pcm != self.ffi.NULL or n_samples:
                raise SpecdecError("both samples (pcm, n_samples) and wav_path were given", "give exactly one: "
                                   "pcm and n_samples with wav_path NULL, or wav_path with pcm NULL and n_samples 0")
            return self._text(wav_path, "wav_path")
        if pcm == self.ffi.NULL:
            if n_samples:
                raise SpecdecError(f"pcm is NULL but n_samples is {n_samples}",
                                   "pass the samples, or wav_path with pcm NULL and n_samples 0")
            raise SpecdecError("no audio: pcm and wav_path are both NULL", NO_AUDIO_FIX)
        if not n_samples:
            raise SpecdecError("n_samples is 0: the audio has no samples", NO_AUDIO_FIX)
        return None

    def _samples(self, pcm, n_samples: int, speech: dict) -> np.ndarray:
        """A copy of the caller's samples, n_samples checked against the longest audio a request takes before the
        buffer is read (audio longer than the window is the runtime's to cut into windows)."""
        rate = int(speech["sampling_rate"])
        limit = MAX_AUDIO_S * rate
        if n_samples > limit:
            raise SpecdecError(f"n_samples is {n_samples} ({n_samples / rate / 3600:.4g} h at {rate} Hz), more than "
                               f"the {limit} samples ({MAX_AUDIO_S / 3600:.4g} h, SPECDEC_MAX_AUDIO_SECONDS) a "
                               "request takes", f"split the recording into parts of at most {limit} samples and "
                               "transcribe each")
        samples = np.frombuffer(self.ffi.buffer(pcm, n_samples * self.ffi.sizeof("float")), np.float32).copy()
        finite = np.isfinite(samples)
        if not finite.all():
            nan = int(np.count_nonzero(np.isnan(samples)))
            raise SpecdecError(f"pcm has {nan} NaN and {n_samples - int(np.count_nonzero(finite)) - nan} infinite "
                               f"samples of {n_samples} (the first at index {int(np.argmin(finite))})",
                               "check the audio source, or replace them with finite values")
        return samples

    def _takes_prompts(self, dec) -> None:
        """The text calls (specdec_generate_ids, _text, specdec_stream, specdec_generate_sequences) on a Whisper
        session: refused in C's words."""
        if dec.manifest.speech is not None:
            raise SpecdecError("this is a Whisper export: it transcribes audio, not a prompt or token ids",
                               "call specdec_transcribe or specdec_transcribe_ids with the samples or a WAV "
                               "file's path")
        super()._takes_prompts(dec)


CALLS = AudioCalls
