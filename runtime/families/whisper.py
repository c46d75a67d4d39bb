"""The Whisper family: a request is audio, decoded from the export's "speech" entry (decoding/speech/).

Its input keywords (generate(audio=..., language=..., task=..., timestamps=...)): `audio`, a float32 array of 16 kHz
mono samples or a WAV file's path; `language` as a code ("en", or its token "<|en|>"; None: detected by the target);
`task` "transcribe" (the default) or "translate"; its suppressed tokens apply to p and q alike. `timestamps` True (a
model with timestamp tokens): the Result's `segments` hold each segment's start, end and text. Audio longer than the
encoder's window is transcribed window by window (decoding/speech/transcript.py; at most 4 h), each window's
decoding exact; max_new_tokens counts per window. A batch does not run its requests yet."""

from __future__ import annotations

from ..core.errors import SpecdecError
from ..core.stats import Piece, Result
from ..decoding.speech.prompt import checked_audio, make_prompt, time_step
from ..decoding.speech.transcript import merged, segments, windows
from ..loading.audio import check_audio


class WhisperFamily:
    """A Whisper export's input checks and long-audio windows (family_of picks it)."""

    inputs = ("audio", "language", "task", "timestamps")
    batchable = False
    refusal = ("batches do not run on Whisper exports yet", "transcribe each audio with generate()")

    def __init__(self, manifest, tokenizer, start_id: int, eos_id: int):
        self.manifest, self.tokenizer, self.start_id, self.eos_id = manifest, tokenizer, start_id, eos_id
        self.speech = manifest.speech

    def samples(self, audio):
        """The request's audio read and checked once (a WAV file's path becomes its samples)."""
        return check_audio(audio) if audio is not None else audio

    def long(self, audio) -> bool:
        """Whether the audio is longer than the encoder's window (decoded window by window)."""
        return audio is not None and audio.size > int(self.speech["n_samples"])

    def prompt(self, language, task, timestamps=False):
        """The decoder prompt a request's choices make (one-line errors for bad ones)."""
        return make_prompt(self.speech, self.start_id, language, task, timestamps)

    def input(self, prompt, input_ids, audio=None, language=None, task=None, timestamps=False) -> tuple:
        """(checked PCM samples inside the window, its SpeechPrompt): a one-line SpecdecError for anything else."""
        pcm, speech = checked_audio(audio, self.speech), self.prompt(language, task, timestamps)
        if prompt is not None or input_ids is not None:
            raise SpecdecError("this is a Whisper export: it transcribes audio, not a prompt text or input_ids",
                               "pass audio= (a float32 16 kHz array or a WAV file's path)")
        return pcm, speech

    def given(self, source, language=None, task=None, timestamps=False) -> dict:
        """A checked input as generate() keywords (what a ticket that runs alone passes on)."""
        return {"audio": source, "language": language, "task": task, "timestamps": timestamps}

    def segments(self, tokens) -> list:
        """A transcript's timestamp tokens read into Segments."""
        stamps = self.speech["timestamps"]
        return segments(tokens, stamps["begin"], stamps["count"], time_step(self.speech), self.eos_id,
                        self._text)

    def _text(self, ids) -> str:
        return self.tokenizer.decode([int(t) for t in ids], skip_special_tokens=True)

    def windows(self, pcm, seed: int, run):
        """(Result, Segments) of each window of long audio; `run(window, timestamps, seed)` decodes one."""
        for _, result, found in windows(pcm, self.speech, run, seed, self.eos_id, self._text):
            yield result, found

    def transcribe(self, pcm, seed: int, timestamps: bool, run) -> Result:
        """The whole recording's Result, its windows' transcripts joined."""
        results, found = [], []
        for result, window_segments in self.windows(pcm, seed, run):
            results.append(result)
            found += window_segments
        ids = [t for s in found for t in s.token_ids]
        return Result(" ".join(s.text for s in found if s.text), ids, merged([r.stats for r in results]),
                      results[-1].stop_reason, [ids], [], segments=found if timestamps else [])

    def stream(self, pcm, seed: int, timestamps: bool, run):
        """A Piece per window of long audio, then the last Piece with the stop reason."""
        results, first = [], True
        for result, found in self.windows(pcm, seed, run):
            results.append(result)
            text = " ".join(s.text for s in found if s.text)
            yield Piece([t for s in found for t in s.token_ids], text if first or not text else " " + text,
                        merged([r.stats for r in results]), "", segments=found if timestamps else [])
            first = first and not text
        yield Piece([], "", merged([r.stats for r in results]), results[-1].stop_reason)
