"""Resolve a T5 or Whisper checkpoint (Hugging Face hub id or local directory) and load it for export."""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from specdec.runtime.core.errors import SpecdecError

SUPPORTED = ("T5 v1.0 (t5-small ... t5-11b), T5 v1.1 / flan-t5 / t5-efficient and mT5 "
             "checkpoints (model_type 't5' or 'mt5'), and Whisper / distil-whisper (model_type 'whisper')")
SUPPORTED_TYPES = ("t5", "mt5", "whisper")
FAMILIES = {"t5": "t5", "mt5": "t5", "whisper": "whisper"}     # model types whose graphs pair as target and draft


@dataclass
class Source:
    """A loaded checkpoint: the PyTorch model in eval mode, its tokenizer and where it came from."""

    name: str              # what the user passed
    revision: str | None   # hub commit hash, or None for a local directory
    model: object          # transformers T5ForConditionalGeneration or WhisperForConditionalGeneration (fp32, eval)
    tokenizer: object      # transformers fast tokenizer
    extractor: object = None    # Whisper: its WhisperFeatureExtractor (the encoder graph computes its features)
    generation: dict = None     # Whisper: generation_config.json as saved (languages, tasks, suppressed tokens)

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


def load_config(name: str, role: str = "target"):
    """The checkpoint's config, with a one-line error for missing models and unsupported architectures. `role`:
    target, draft or a further draft's name, for the hint of an error."""
    from transformers import AutoConfig

    _quiet_transformers()
    try:
        config = AutoConfig.from_pretrained(name)
    except (OSError, ValueError, KeyError) as err:
        raise _not_found(name, err, role) from None
    if config.model_type not in SUPPORTED_TYPES or not getattr(config, "is_encoder_decoder", False):
        raise SpecdecError(f"'{name}' is a '{config.model_type}' model, which specdec does not export",
                           f"supported are {SUPPORTED}")
    return config


def load_source(name: str, role: str = "target") -> Source:
    """Load config, weights (fp32, eval mode) and tokenizer of a T5 or Whisper checkpoint (and Whisper's feature
    extractor)."""
    import torch
    from transformers import AutoTokenizer, T5ForConditionalGeneration, WhisperForConditionalGeneration

    config = load_config(name, role)
    whisper = config.model_type == "whisper"
    # mT5 never scales decoder outputs (MT5ForConditionalGeneration), but configs saved by transformers >= 5 say
    # tie_word_embeddings=true, from which T5Config would infer v1.0's scaling: say it explicitly.
    extra = {"scale_decoder_outputs": False} if config.model_type == "mt5" else {}
    kind = WhisperForConditionalGeneration if whisper else T5ForConditionalGeneration
    try:
        model = kind.from_pretrained(name, dtype=torch.float32, **extra)
    except (OSError, ValueError) as err:
        raise _not_found(name, err, role) from None
    model.eval()
    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as err:
        raise SpecdecError(f"no tokenizer found for '{name}' ({type(err).__name__})",
                           "add tokenizer.json (a fast tokenizer) to the checkpoint directory") from None
    if getattr(tokenizer, "backend_tokenizer", None) is None:
        raise SpecdecError(f"the tokenizer of '{name}' is not a fast (tokenizers) tokenizer",
                           "convert it and save tokenizer.json next to config.json")
    extractor = load_extractor(name, config) if whisper else None
    generation = generation_file(name) if whisper else {}
    revision = None if Path(name).exists() else hub_revision(name, config)
    return Source(name=name, revision=revision, model=model, tokenizer=tokenizer, extractor=extractor,
                  generation=generation)


def generation_file(name: str) -> dict:
    """A checkpoint's generation_config.json as saved. Read as JSON: transformers' GenerationConfig keeps only the
    fields it declares, and Whisper's prompt tokens (lang_to_id, task_to_id, no_timestamps_token_id) are not."""
    import json

    from transformers.utils import cached_file

    try:
        path = cached_file(name, "generation_config.json", _raise_exceptions_for_missing_entries=False)
    except (OSError, ValueError):
        path = None
    if path is None:
        raise SpecdecError(f"'{name}' has no generation_config.json: Whisper's prompt tokens are listed there",
                           "add the checkpoint's generation_config.json to its directory")
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise SpecdecError(f"the generation_config.json of '{name}' is unreadable ({type(err).__name__})",
                           "restore the checkpoint's generation_config.json") from None
    if not isinstance(data, dict):
        raise SpecdecError(f"the generation_config.json of '{name}' is not a JSON object",
                           "restore the checkpoint's generation_config.json")
    return data


def load_extractor(name: str, config):
    """A Whisper checkpoint's WhisperFeatureExtractor (preprocessor_config.json), checked against its encoder."""
    from transformers import WhisperFeatureExtractor

    try:
        extractor = WhisperFeatureExtractor.from_pretrained(name)
    except (OSError, ValueError) as err:
        raise SpecdecError(f"no feature extractor found for '{name}' ({type(err).__name__})",
                           "add preprocessor_config.json (WhisperFeatureExtractor.save_pretrained) to the "
                           "checkpoint directory") from None
    frames = extractor.n_samples // extractor.hop_length
    if extractor.feature_size != config.num_mel_bins or frames != 2 * config.max_source_positions:
        raise SpecdecError(f"the feature extractor of '{name}' makes {extractor.feature_size} mel bins x {frames} "
                           f"frames, but its encoder reads {config.num_mel_bins} x {2 * config.max_source_positions}",
                           "use the checkpoint's own preprocessor_config.json")
    return extractor


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
