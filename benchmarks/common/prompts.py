"""Benchmark prompts: a JSONL file, a plain text file (one prompt a line), the bundled test prompts
(models/prompts/test.jsonl), random token ids, or random audio for a Whisper export. A JSONL line is one prompt:

    {"source": "translate English to German: ...", "task": "translate", "reference": "..."}   # text, tokenized
    {"input_ids": [13959, 1566, 12, 2968, 10, 1]}                                           # token ids as they are
    {"audio": "clips/0001.wav", "reference": "the spoken text", "task": "...", "language": "en"}   # a Whisper export

"task" (optional) groups the report's rows. An "audio" line names a 16 kHz WAV file (mono, or mixed to mono), its
path relative to the JSONL file's folder, generated with "language" (default "en"; None for an English-only model).
Audio prompts are for a Whisper export only, text prompts for a text export only."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path

import numpy as np

from specdec.runtime.core.errors import SpecdecError

AUDIO_LINE = '{"audio": "clip.wav"} lines (16 kHz WAV files, paths relative to the JSONL file)'


@dataclass
class Prompt:
    text: str | None = None
    input_ids: list | None = None
    task: str = ""
    reference: str | None = None
    ids: list = field(default_factory=list)      # token ids as the runtime sees them (filled by `tokenize`)
    clip: Path | None = None                      # an audio prompt's WAV file (read by `read_clips`)
    audio: np.ndarray | None = field(default=None, repr=False, compare=False)   # its float32 16 kHz samples
    language: str | None = None                   # an audio prompt's language (None: none or detected)

    @property
    def is_audio(self) -> bool:
        return self.clip is not None or self.audio is not None

    @property
    def source(self):
        """What the encoders read."""
        return self.audio if self.is_audio else self.ids

    def kwargs(self) -> dict:
        """Its keywords of SpeculativeDecoder.generate / stream."""
        return {"audio": self.audio, "language": self.language} if self.is_audio else {"input_ids": self.ids}


def special_id(decoder, name: str) -> int:
    return int(decoder.manifest.special_ids[name])


def bundled_prompts_file() -> Path | None:
    try:
        import specdec.models
    except ImportError:
        return None
    path = Path(specdec.models.__file__).parent / "prompts" / "test.jsonl"
    return path if path.is_file() else None


def _line(path: Path, number: int, line: str) -> Prompt:
    where = f"{path}:{number}"
    try:
        item = json.loads(line)
    except json.JSONDecodeError:
        raise SpecdecError(f"{where} is not valid JSON",
                           'write one {"source": "..."} object a line, or plain text lines') from None
    if not isinstance(item, dict):
        raise SpecdecError(f"{where} is not a JSON object", 'write one {"source": "..."} object a line')
    task = str(item.get("task", ""))
    if "audio" in item:
        for key in ("audio", "reference", "language"):
            if item.get(key) is not None and not isinstance(item[key], str):
                raise SpecdecError(f'{where}: "{key}" is not a string (it is a JSON {type(item[key]).__name__})')
        if not item["audio"]:
            raise SpecdecError(f'{where}: "audio" must name a WAV file', f"write {AUDIO_LINE}")
        return Prompt(clip=path.parent / item["audio"], task=task, reference=item.get("reference"),
                      language=item.get("language"))
    if "input_ids" in item:
        return Prompt(input_ids=[int(t) for t in item["input_ids"]], task=task)
    if isinstance(item.get("source"), str):
        return Prompt(text=item["source"], task=task, reference=item.get("reference"))
    raise SpecdecError(f'{where} has neither "source", "input_ids" nor "audio"')


def read_prompts(path: str | Path, audio: bool = True) -> list[Prompt]:
    """The prompts of a JSONL or plain text file; `audio`: read the WAV files now, else leave that to read_clips."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise SpecdecError(f"cannot read prompts file '{path}' ({err.strerror})", "check --prompts") from None
    out = [_line(path, number, line) if line.startswith("{") else Prompt(text=line)
           for number, line in ((n, raw.strip()) for n, raw in enumerate(lines, 1)) if line]
    if not out:
        raise SpecdecError(f"prompts file '{path}' has no prompts")
    return read_clips(out) if audio else out


def read_clips(prompts: list[Prompt]) -> list[Prompt]:
    from specdec.runtime.loading.audio import check_audio

    for p in prompts:
        if p.clip is not None and p.audio is None:
            p.audio = check_audio(p.clip)
    return prompts


def select(prompts: list[Prompt], count: int, every_task: bool = False) -> list[Prompt]:
    """`count` prompts taken round-robin over tasks (file order within a task); `every_task`: at least one per
    task even when count is smaller."""
    by_task: dict[str, list[Prompt]] = {}
    for p in prompts:
        by_task.setdefault(p.task, []).append(p)
    if every_task and count > 0:
        count = max(count, len(by_task))
    if count <= 0 or count >= len(prompts):
        count = len(prompts)
    return [p for row in zip_longest(*by_task.values()) for p in row if p is not None][:count]


def random_prompts(vocab_size: int, count: int, length: int = 16, first_id: int = 3, eos_id: int = 1,
                   seed: int = 0) -> list[Prompt]:
    rng = np.random.default_rng(seed)
    return [Prompt(input_ids=[int(t) for t in rng.integers(first_id, vocab_size, size=length - 1)] + [eos_id],
                   task="random") for _ in range(count)]


def random_audio(speech: dict, count: int, seed: int = 0) -> list[Prompt]:
    """Noise (0.1 RMS) filling a Whisper export's encoder window, in its first language: no language detection."""
    rng = np.random.default_rng(seed)
    language = min(speech["languages"], key=speech["languages"].get, default=None)
    return [Prompt(task="random audio", language=language,
                   audio=(0.1 * rng.standard_normal(int(speech["n_samples"]))).astype(np.float32))
            for _ in range(count)]


def tokenize(prompts: list[Prompt], tokenizer, max_length: int) -> list[Prompt]:
    """Fill the text prompts' ids (truncated to max_length)."""
    for p in prompts:
        if p.is_audio:
            continue
        ids = list(p.input_ids) if p.input_ids is not None else tokenizer.encode(p.text).ids
        if not ids:
            raise SpecdecError(f"prompt {p.text!r} tokenizes to nothing")
        p.ids = [int(t) for t in ids[:max_length]]
    return prompts


def audio_seconds(prompts: list[Prompt], rate: int = 16_000) -> float | None:
    clips = [p.audio.size for p in prompts if p.audio is not None]
    return sum(clips) / rate if clips else None


def describe(prompts: list[Prompt]) -> str:
    """`8 prompts`, or `2 audio clips, 3.5 s in all`."""
    seconds, s = audio_seconds(prompts), "s" if len(prompts) != 1 else ""
    return f"{len(prompts)} prompt{s}" if seconds is None else f"{len(prompts)} audio clip{s}, {seconds:.1f} s in all"


def load(prompts_arg: str | None, count: int, decoder, every_task: bool = False,
         audio: bool = False) -> tuple[list[Prompt], str]:
    """(prompts for `decoder`, where they came from). `audio`: the command runs on a Whisper export too (its
    prompts from --prompts, else random audio)."""
    speech = decoder.manifest.speech
    if speech is not None and not audio:
        raise SpecdecError("this command measures text exports, and this export is a Whisper model",
                           "on a Whisper export run specdec-bench drafts --prompts FILE.jsonl (audio clips) or "
                           "specdec-bench shapes")
    bundled = bundled_prompts_file()
    if prompts_arg:
        prompts, origin = read_prompts(prompts_arg, audio=False), str(prompts_arg)
        clips = sum(p.is_audio for p in prompts)
        if speech is not None and clips < len(prompts):
            raise SpecdecError(f"{origin} has text prompts, but this export is a Whisper model: it transcribes "
                               "audio", f"give --prompts a JSONL file of {AUDIO_LINE}")
        if speech is None and clips:
            raise SpecdecError(f"{origin} has audio prompts, but this export is not a Whisper model",
                               'give --prompts text prompts ({"source": "..."} JSONL lines or plain text lines), '
                               "or --export a Whisper export")
        prompts = read_clips(select(prompts, count, every_task))
    elif speech is not None:
        prompts = random_audio(speech, max(count, 1))
        origin = "random audio (no --prompts given; pass --prompts FILE.jsonl of audio clips for real speech)"
    elif bundled is not None and Path(decoder.manifest.models["target"].source).resolve() == \
            (bundled.parents[1] / "target").resolve():            # exported from the project's own pair
        prompts, origin = select(read_prompts(bundled), count, every_task), str(bundled)
    else:
        prompts = random_prompts(decoder.vocabulary.tokenizer_size, max(count, 1),
                                 eos_id=special_id(decoder, "eos_token_id"))
        origin = "random token ids (no --prompts given; pass --prompts FILE for real text)"
    if speech is not None:            # an audio prompt without "language": "en" (None for an English-only model)
        for p in prompts:
            if p.language is None:
                p.language = "en" if speech.get("languages") else None
    return tokenize(prompts, decoder.tokenizer, decoder.max_length), origin
