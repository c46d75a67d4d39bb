"""A Whisper request: its audio checked against the encoder's window, and its decoder prompt (start of transcript,
language, task, no timestamps) made from the export's "speech" entry as a DecoderPrompt (decoding/prompt.py, which
detects the language when the request names none and runs the prompt into the target's cache)."""

from __future__ import annotations

import numpy as np

from ...core.errors import SpecdecError
from ...loading.audio import check_audio
from ...decoding.prompt import DecoderPrompt


def checked_audio(audio, speech: dict) -> np.ndarray:
    """A request's audio (loading/audio.py: an array or a WAV path, checked) inside the encoder's window."""
    if audio is None:
        raise SpecdecError("this is a Whisper export: it transcribes audio",
                           "pass audio= (a float32 16 kHz array or a WAV file's path)")
    pcm = check_audio(audio)
    window = int(speech["n_samples"])
    if pcm.size > window:
        rate = int(speech["sampling_rate"])
        raise SpecdecError(f"the audio is {pcm.size / rate:.1f} s long, longer than the encoder's "
                           f"{window / rate:.0f} s window", f"split it into pieces of at most {window / rate:.0f} s")
    return pcm


MAX_INITIAL_S = 1.0          # a transcript with timestamps starts at most this far into the window (Whisper's rule)


def make_prompt(speech: dict, start_id: int, language, task, timestamps: bool = False) -> DecoderPrompt:
    """The decoder prompt of a Whisper request: start of transcript, language (None: detect), task, no timestamps
    (those the export's model has; no timestamps left out when `timestamps`), and the tokens its generation
    suppresses."""
    languages, tasks = speech["languages"], speech["tasks"]
    tokens = [start_id]
    if languages:
        if language is None:
            tokens.append(None)
        else:
            key = language if str(language).startswith("<|") else f"<|{language}|>"
            if key not in languages:
                known = sorted(k.strip("<|>") for k in languages)
                codes = ", ".join(known[:12]) + (", ..." if len(known) > 12 else "")
                raise SpecdecError(f"language {language!r} is not one this model knows",
                                   f"use one of its language codes ({codes}) or None to detect it")
            tokens.append(int(languages[key]))
    elif language is not None:
        raise SpecdecError("this Whisper model is English-only: it takes no language", "leave out language")
    task = "transcribe" if task is None else task
    if tasks:
        if task not in tasks:
            raise SpecdecError(f"task {task!r} is not one this model knows", f"use one of {', '.join(sorted(tasks))}")
        tokens.append(int(tasks[task]))
    elif task != "transcribe":
        raise SpecdecError("this Whisper model is English-only: it only transcribes", "leave out task")
    if timestamps not in (True, False):
        raise SpecdecError(f"timestamps must be True or False (got {timestamps!r})",
                           "pass timestamps=True for segments with start and end times")
    stamps = speech.get("timestamps")
    if timestamps:
        if stamps is None:
            raise SpecdecError("this Whisper model has no timestamp tokens", "leave out timestamps (its text comes "
                               "without segment times)")
        if speech["no_timestamps_token_id"] is None:
            raise SpecdecError("this Whisper model has timestamp tokens but no <|notimestamps|>",
                               "export it from a checkpoint whose generation config sets no_timestamps_token_id")
        rule = (int(stamps["begin"]), int(stamps["count"]), round(MAX_INITIAL_S / time_step(speech)),
                int(speech["no_timestamps_token_id"]))
    elif speech["no_timestamps_token_id"] is not None:
        tokens.append(int(speech["no_timestamps_token_id"]))
    return DecoderPrompt(tuple(tokens), tuple(int(v) for v in languages.values()) if language is None else (),
                        tuple(speech["suppress_tokens"]), tuple(speech["begin_suppress_tokens"]),
                        rule if timestamps else ())


def time_step(speech: dict) -> float:
    """Seconds between timestamp tokens: the window over its encoder positions (0.02 s, as in Whisper)."""
    return speech["n_samples"] / speech["sampling_rate"] / speech["frames"]
