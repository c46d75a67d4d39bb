"""Benchmark prompts: a JSONL file ({"source": ...} or {"input_ids": [...]}, optionally "task"), a plain text file
(one prompt a line), the bundled test prompts (models/prompts/test.jsonl), or random token ids."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from specdec.runtime.core.errors import SpecdecError


@dataclass
class Prompt:
    text: str | None = None
    input_ids: list | None = None
    task: str = ""
    reference: str | None = None
    ids: list = field(default_factory=list)      # token ids as the runtime sees them (filled by `tokenize`)

    def kwargs(self) -> dict:
        return {"input_ids": self.ids}


def special_id(decoder, name: str) -> int:
    """A special token id of a SpeculativeDecoder's export ("eos_token_id", "decoder_start_token_id", ...), read
    from its public manifest."""
    return int(decoder.manifest.special_ids[name])


def bundled_prompts_file() -> Path | None:
    try:
        import specdec.models
    except ImportError:
        return None
    path = Path(specdec.models.__file__).parent / "prompts" / "test.jsonl"
    return path if path.is_file() else None


def read_prompts(path: str | Path) -> list[Prompt]:
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise SpecdecError(f"cannot read prompts file '{path}' ({err.strerror})", "check --prompts") from None
    out = []
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line:
            continue
        if line.startswith("{"):
            try:
                item = json.loads(line)
            except json.JSONDecodeError:
                raise SpecdecError(f"{path}:{number} is not valid JSON",
                                   'write one {"source": "..."} object a line, or plain text lines') from None
            if "input_ids" in item:
                out.append(Prompt(input_ids=[int(t) for t in item["input_ids"]], task=str(item.get("task", ""))))
            elif isinstance(item.get("source"), str):
                out.append(Prompt(text=item["source"], task=str(item.get("task", "")),
                                  reference=item.get("reference")))
            else:
                raise SpecdecError(f'{path}:{number} has neither "source" nor "input_ids"')
        else:
            out.append(Prompt(text=line))
    if not out:
        raise SpecdecError(f"prompts file '{path}' has no prompts")
    return out


def select(prompts: list[Prompt], count: int, every_task: bool = False) -> list[Prompt]:
    """`count` prompts taken round-robin over tasks (file order within a task), so the tasks alternate and each
    gets count / tasks (as far as it has them). `every_task`: at least one per task even when count is smaller."""
    by_task: dict[str, list[Prompt]] = {}
    for p in prompts:
        by_task.setdefault(p.task, []).append(p)
    if every_task and count > 0:
        count = max(count, len(by_task))
    if count <= 0 or count >= len(prompts):
        count = len(prompts)
    queues = list(by_task.values())
    out, i = [], 0
    while len(out) < count:
        queue = queues[i % len(queues)]
        if queue:
            out.append(queue.pop(0))
        i += 1
    return out


def random_prompts(vocab_size: int, count: int, length: int = 16, first_id: int = 3, eos_id: int = 1,
                   seed: int = 0) -> list[Prompt]:
    """Random token ids (what real-shape models with random weights are fed)."""
    rng = np.random.default_rng(seed)
    return [Prompt(input_ids=[int(t) for t in rng.integers(first_id, vocab_size, size=length - 1)] + [eos_id],
                   task="random") for _ in range(count)]


def tokenize(prompts: list[Prompt], tokenizer, max_length: int) -> list[Prompt]:
    """Fill Prompt.ids (truncated to the engine's max_length) with the engine's tokenizer."""
    for p in prompts:
        ids = list(p.input_ids) if p.input_ids is not None else tokenizer.encode(p.text).ids
        if not ids:
            raise SpecdecError(f"prompt {p.text!r} tokenizes to nothing")
        p.ids = [int(t) for t in ids[:max_length]]
    return prompts


def _is_bundled(source: str) -> bool:
    """Was the engine exported from the project's own pair (models/target)?"""
    try:
        return Path(source).resolve() == (bundled_prompts_file().parents[1] / "target").resolve()
    except (OSError, TypeError, AttributeError):
        return False


def load(prompts_arg: str | None, count: int, decoder, every_task: bool = False) -> tuple[list[Prompt], str]:
    """Prompts for `decoder` (a SpeculativeDecoder) and a description of where they came from (`every_task`: see
    select)."""
    if prompts_arg:
        prompts, origin = select(read_prompts(prompts_arg), count, every_task), str(prompts_arg)
    elif bundled_prompts_file() is not None and _is_bundled(decoder.manifest.models["target"].source):
        path = bundled_prompts_file()
        prompts, origin = select(read_prompts(path), count, every_task), str(path)
    else:
        prompts = random_prompts(decoder.vocabulary.tokenizer_size, max(count, 1),
                                 eos_id=special_id(decoder, "eos_token_id"))
        origin = "random token ids (no --prompts given; pass --prompts FILE for real text)"
    return tokenize(prompts, decoder.tokenizer, decoder.max_length), origin
