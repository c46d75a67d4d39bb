"""The Whisper calls of libspecdec (include/specdec.h, API version 6): specdec_get_audio_info, specdec_transcribe and
specdec_transcribe_ids, as a mixin of bindings/_capi.py's CApi (whose helpers they use: _session, _hold, _params,
_out_buffer, _fill_stats, _give_ids, _give_text, _text).

What C passes differently from Python is checked here, in C's words: which audio input was given (samples, or a WAV
file's path: exactly one), n_samples against the export's window before the caller's buffer is read, and non-finite
samples. Everything else is SpeculativeDecoder.generate(audio=..., language=..., task=...)'s: it reads a WAV file with
runtime/loading/audio.py and refuses an unknown language or task or a bad file in one line. Prompts
sent to a Whisper session by the text calls are refused by _takes_prompts, in C's words too.

A SpecdecError raised here becomes SPECDEC_E_INVALID_ARGUMENT with its one-line message (CApi._entry).
"""

from __future__ import annotations

import numpy as np

from specdec.runtime import SpecdecError

NO_AUDIO_FIX = "pass mono 16 kHz float samples (pcm and n_samples) or the path of a WAV file (wav_path)"


class AudioCalls:
    """specdec_get_audio_info, specdec_transcribe and specdec_transcribe_ids (a mixin of CApi)."""

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

    # -- helpers ----------------------------------------------------------------------------------------------
    def _transcribed(self, ptr, pcm, n_samples, wav_path, language, task, params, out, out_capacity, out_len,
                     what: str):
        """The Result of one request: its arguments checked, the session held while its samples are read and
        the runtime generates."""
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
            audio = path if path is not None else self._samples(pcm, n_samples, speech)
            return dec.generate(audio=audio, language=lang, task=kind, params=request)

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
        """A copy of the caller's samples, n_samples checked against the window before the buffer is read."""
        window, rate = int(speech["n_samples"]), int(speech["sampling_rate"])
        if n_samples > window:
            raise SpecdecError(f"n_samples is {n_samples} ({n_samples / rate:.2f} s at {rate} Hz), more than the "
                               f"export's window of {window} samples ({window / rate:.2f} s)",
                               f"split the audio into pieces of at most {window} samples (specdec_get_audio_info "
                               "gives the window)")
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
