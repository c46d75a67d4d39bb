"""The Whisper family: a request is audio, decoded from the export's "speech" entry (prompt.py, transcript.py).

Its input keywords (generate(audio=..., language=..., task=..., timestamps=...)): `audio`, a float32 array of 16 kHz
mono samples or a WAV file's path; `language` as a code ("en", or its token "<|en|>"; None: detected by the target);
`task` "transcribe" (the default) or "translate"; its suppressed tokens apply to p and q alike. `timestamps` True (a
model with timestamp tokens): the Result's `segments` hold each segment's start, end and text. Audio longer than the
encoder's window is transcribed window by window (families/whisper/transcript.py; at most 4 h), each window's
decoding exact; max_new_tokens counts per window. A batch does not run its requests yet."""

from __future__ import annotations

from ...core.errors import SpecdecError
from ...core.stats import Piece, Result
from .prompt import checked_audio, make_prompt, time_step
from .transcript import merged, segments, windows
from ...loading.audio import check_audio


class WhisperFamily:
    """A Whisper export's input checks and long-audio windows (family_of picks it)."""

    inputs = ("audio", "language", "task", "timestamps")
    batchable = False
    refusal = ("batches do not run on Whisper exports yet", "transcribe each audio with generate()")

    def __init__(self, manifest, tokenizer, start_id: int, eos_id: int):
        self.manifest, self.tokenizer, self.start_id, self.eos_id = manifest, tokenizer, start_id, eos_id
        self.speech = manifest.speech

    drafts_apart = ("draft= from another export does not apply to Whisper exports",
                    "export the Whisper pair together and load that one directory")
    foreign = ("audio, language, task and timestamps are for Whisper exports; this export is a text model",
               "pass a prompt text or input_ids")      # what an export of another family says of these keywords

    @staticmethod
    def shared_encoders(manifest) -> list:
        """The draft models that run the target's encoder instead of their own."""
        return list(manifest.speech.get("shares_target_encoder", []))

    def read(self, given: dict) -> dict:
        """The request's audio read and checked once (a WAV file's path becomes its samples)."""
        audio = given.get("audio")
        return {**given, "audio": check_audio(audio)} if audio is not None else given

    def whole(self, given: dict) -> bool:
        """Whether the audio is longer than the encoder's window (decoded window by window)."""
        audio = given.get("audio")
        return audio is not None and audio.size > int(self.speech["n_samples"])

    def choices(self, given: dict, timestamps=None):
        """The decoder prompt a request's choices make (one-line errors for bad ones)."""
        stamps = given.get("timestamps", False) if timestamps is None else timestamps
        return make_prompt(self.speech, self.start_id, given.get("language"), given.get("task"), stamps)

    def input(self, prompt, input_ids, given: dict, window=None, timestamps=None) -> tuple:
        """(checked PCM samples inside the window, its DecoderPrompt): a one-line SpecdecError for anything else.
        `window`, `timestamps`: one window of long audio, decoded with or without timestamps."""
        pcm = checked_audio(given.get("audio") if window is None else window, self.speech)
        speech = self.choices(given, timestamps)
        if prompt is not None or input_ids is not None:
            raise SpecdecError("this is a Whisper export: it transcribes audio, not a prompt text or input_ids",
                               "pass audio= (a float32 16 kHz array or a WAV file's path)")
        return pcm, speech

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

    def transcribe(self, given: dict, seed: int, run) -> Result:
        """The whole recording's Result, its windows' transcripts joined."""
        pcm, timestamps = given["audio"], given.get("timestamps", False)
        results, found = [], []
        for result, window_segments in self.windows(pcm, seed, run):
            results.append(result)
            found += window_segments
        ids = [t for s in found for t in s.token_ids]
        return Result(" ".join(s.text for s in found if s.text), ids, merged([r.stats for r in results]),
                      results[-1].stop_reason, [ids], [], segments=found if timestamps else [])

    def stream(self, given: dict, seed: int, run):
        """A Piece per window of long audio, then the last Piece with the stop reason."""
        pcm, timestamps = given["audio"], given.get("timestamps", False)
        results, first = [], True
        for result, found in self.windows(pcm, seed, run):
            results.append(result)
            text = " ".join(s.text for s in found if s.text)
            yield Piece([t for s in found for t in s.token_ids], text if first or not text else " " + text,
                        merged([r.stats for r in results]), "", segments=found if timestamps else [])
            first = first and not text
        yield Piece([], "", merged([r.stats for r in results]), results[-1].stop_reason)
