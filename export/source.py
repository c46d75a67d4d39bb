"""Resolve a checkpoint (Hugging Face hub id or local directory) and read its config, weights and tokenizer for
export; which model class and what else to load is its family's part (export/families/)."""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from specdec.runtime.core.errors import SpecdecError


@dataclass
class Source:
    """A loaded checkpoint: the PyTorch model in eval mode, its tokenizer and where it came from."""

    name: str              # what the user passed
    revision: str | None   # hub commit hash, or None for a local directory
    model: object          # the family's transformers model (fp32, eval)
    tokenizer: object      # transformers fast tokenizer
    extras: dict = field(default_factory=dict)     # what else the family loaded for its graphs and manifest entries

    @property
    def config(self):
        return self.model.config


def _quiet_transformers():
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)


def hub_offline() -> bool:
    """HF_HUB_OFFLINE is set: hub ids are looked up in the local Hugging Face cache only, never on the network."""
    return os.environ.get("HF_HUB_OFFLINE", "0").strip() not in ("0", "", "false", "False")


def hub_notice(name: str) -> str | None:
    """The line to show before `name` is asked of the Hugging Face hub (a name that is not a local directory, with
    HF_HUB_OFFLINE unset): without a network the hub's retries take ~25 s before the error. None otherwise."""
    if Path(name).exists() or hub_offline():
        return None
    return (f"'{name}' is not a local directory: asking the Hugging Face hub (without a network this waits ~25 s "
            "before failing; HF_HUB_OFFLINE=1 uses the local cache only, at once)")


def _flag(role: str) -> str:
    """How the command line names a role's checkpoint: --target, --draft, or --draft NAME= for a further draft."""
    return "--target " if role == "target" else "--draft " if role == "draft" else f"--draft {role}="


def _not_found(name: str, cause: Exception, role: str = "target") -> SpecdecError:
    if Path(name).exists():
        return SpecdecError(f"'{name}' is not a loadable checkpoint directory ({type(cause).__name__})",
                            f"point {_flag(role).strip(' =')} at a folder with config.json, the weights and the "
                            "tokenizer")
    local = "./" + (re.split(r"[/\\]", name.rstrip("/\\"))[-1] or "checkpoint")
    instead = (f"pass a local checkpoint directory instead, e.g. {_flag(role)}{local} (save one with "
               "save_pretrained on a machine with network)")
    if hub_offline():
        return SpecdecError(f"model '{name}' could not be found in the local Hugging Face cache (HF_HUB_OFFLINE is "
                            "set)", f"{instead}, or unset HF_HUB_OFFLINE to download it")
    return SpecdecError(f"model '{name}' could not be found on the Hugging Face hub (no network?) or in the local "
                        "cache", f"{instead}; with the model in the cache, set HF_HUB_OFFLINE=1 to use it without "
                        "waiting for the network")


def read_config(name: str, role: str = "target"):
    """The checkpoint's config, with a one-line error for a missing model. `role`: target, draft or a further
    draft's name, for the hint of an error. Whether a family exports it is export/families/'s part."""
    from transformers import AutoConfig

    _quiet_transformers()
    try:
        return AutoConfig.from_pretrained(name)
    except (OSError, ValueError, KeyError) as err:
        raise _not_found(name, err, role) from None


def read_weights(kind, name: str, role: str = "target", **extra):
    """The checkpoint's weights as `kind` (a transformers model class) in fp32, eval mode; `extra`: keyword arguments
    of from_pretrained."""
    import torch

    try:
        model = kind.from_pretrained(name, dtype=torch.float32, **extra)
    except (OSError, ValueError) as err:
        raise _not_found(name, err, role) from None
    return model.eval()


def read_tokenizer(name: str):
    """The checkpoint's fast tokenizer, with a one-line error when it has none."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as err:
        raise SpecdecError(f"no tokenizer found for '{name}' ({type(err).__name__})",
                           "add tokenizer.json (a fast tokenizer) to the checkpoint directory") from None
    if getattr(tokenizer, "backend_tokenizer", None) is None:
        raise SpecdecError(f"the tokenizer of '{name}' is not a fast (tokenizers) tokenizer",
                           "convert it and save tokenizer.json next to config.json")
    return tokenizer


def read_source(name: str, role: str, config, kind, extras_of=None, **extra) -> Source:
    """A Source of the checkpoint `name`: weights as `kind` (read_weights, `extra` its keyword arguments), the
    tokenizer, and `extras_of(name, config)` (a family's further files) when given."""
    model = read_weights(kind, name, role, **extra)
    tokenizer = read_tokenizer(name)
    extras = extras_of(name, config) if extras_of is not None else {}
    revision = None if Path(name).exists() else hub_revision(name, config)
    return Source(name=name, revision=revision, model=model, tokenizer=tokenizer, extras=extras)


def hub_revision(name: str, config) -> str | None:
    """The commit hash of the hub snapshot `name` was loaded from. transformers < 5 kept it in
    config._commit_hash; transformers 5 dropped that, so read it from the cache the files were just resolved in."""
    revision = getattr(config, "_commit_hash", None)
    if revision:
        return revision
    try:
        from huggingface_hub import try_to_load_from_cache

        path = try_to_load_from_cache(name, "config.json")
    except Exception:       # an id the cache layout cannot name: no revision to record
        return None
    if not isinstance(path, str):
        return None
    match = re.search(r"/snapshots/([0-9a-f]{40})/", Path(path).as_posix())
    return match.group(1) if match else None

