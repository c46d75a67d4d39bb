"""The sources a parsed `draft=` names, built: a chain of draft models, lowest level first, with the lookup as its
lowest level when it names one (decoding/plan.py parses the names; learned.py keeps what is built)."""

from __future__ import annotations

from .contract import DraftSource
from .lookup import LookupDraft, configured
from .model_draft import ModelDraft


def build(parts: list[str], models: dict, lookup: LookupDraft | None = None, datastore=None,
          tokenizer_size: int | None = None) -> DraftSource:
    """The source for a parsed chain (not "none" or "auto"); `models`: name -> CachedSeq2Seq; `lookup`: the
    LookupDraft to use (when None, a new one searching `datastore` too, if given, and proposing no id at or past
    `tokenizer_size`). Its lookup is configured by Learned.for_sampling, which knows where it proposes."""
    source = None
    for i, part in enumerate(parts):            # level 0 proposes to the target, level len - 1 is the lowest
        if part == "lookup":
            source = lookup or configured(datastore=datastore, tokenizer_size=tokenizer_size)
        else:
            source = ModelDraft(models[part], below=source, name=",".join(parts[:i + 1]), level=len(parts) - 1 - i)
    return source
