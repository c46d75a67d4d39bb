"""The model families specdec exports, and the one place a checkpoint's family is chosen: `family_of`.

A family (export/families/base.py) is what differs between kinds of checkpoints on the export side: loading, the
graph writers, the parity probe's inputs, the options it refuses and its manifest entries. Each has a module here
with its FAMILY; its graph writers sit beside it.
"""

from __future__ import annotations

from os import PathLike
from pathlib import Path

from specdec.runtime.core.errors import SpecdecError

from . import t5, whisper
from .base import Family

FAMILIES = (t5.FAMILY, whisper.FAMILY)      # in the order an error lists them


def supported() -> str:
    """The checkpoints the families export, in words."""
    texts = [family.supported for family in FAMILIES]
    return ", ".join(texts[:-1]) + ", and " + texts[-1] if len(texts) > 1 else texts[0]


def family_of(config_or_checkpoint, role: str = "target", name: str | None = None) -> Family:
    """The family that exports a checkpoint: given its config, or its name (a hub id or local directory, whose
    config is read). A one-line SpecdecError for an architecture no family takes, naming the ones there are.
    `role` and `name` (the checkpoint as the user gave it) are for the messages."""
    config = config_or_checkpoint
    if isinstance(config, (str, PathLike)):
        from ..source import read_config

        name = str(config) if name is None else name
        config = read_config(str(config), role)
    for family in FAMILIES:
        if family.takes(config):
            return family
    raise SpecdecError(f"'{name if name is not None else config.name_or_path}' is a '{config.model_type}' model, "
                       "which specdec does not export", f"supported are {supported()}")


def load_config(name: str, role: str = "target"):
    """The checkpoint's config, with a one-line error for a missing model and for an architecture no family takes.
    `role`: target, draft or a further draft's name, for the hint of an error."""
    from ..source import read_config

    config = read_config(name, role)
    family_of(config, role, name)
    return config


def load_source(name: str, role: str = "target"):
    """The checkpoint `name` loaded by its family: weights (fp32, eval mode), tokenizer and the family's extras."""
    config = load_config(name, role)
    return family_of(config, role, name).load(name, role, config)


def shipped_draft(name: str, log=print) -> str | None:
    """The checkpoint of the draft shipped for the target `name` (its family's `shipped_draft`), else None; None too
    for a local path that is not there (the export then says so, after checking its options)."""
    if not Path(name).expanduser().is_dir() and (Path(name).is_absolute() or name.startswith((".", "~"))):
        return None
    path = checkpoint_path(name, log)
    return family_of(load_config(path, "target"), "target", name).shipped_draft(path, log)


def checkpoint_path(name: str, log=print) -> str:
    """Where the checkpoint `name` is read: `name` itself, or for a folder of another format a family reads (its
    `folders`: a CTranslate2 one) that folder's conversion to a transformers checkpoint, made once into a cache and
    reused; `log` says which."""
    import time

    for family in FAMILIES:
        started = time.perf_counter()
        path = family.transformers_folder(name)
        if path is not None:
            log(f"  {name}: {family.folders.split(' (')[0]}, read as the transformers checkpoint {path} "
                f"({time.perf_counter() - started:.1f} s)")
            return path
    return name

