"""What an export family is: everything the exporter does differently for one kind of checkpoint, asked of one object.

The family is chosen once, from the target's config (export/families/__init__.py, `family_of`); the pipeline
(export/pipeline.py), the parity check and the manifest's writer then ask it instead of testing the model type:

    transformers_folder   a folder of another format the family reads (CTranslate2), converted for loading
    load              the checkpoint's weights, tokenizer and whatever else the family's graphs need
    refuse            the export options the family cannot honour (one-line SpecdecError)
    graph_writer      which graph writer makes a model's encoder and decoder graphs
    encoder_digests   the models' encoder digests, and keeps_target_encoder: drafts whose encoder is the target's
    probe             the parity probe's inputs: what the encoder graph reads, and what PyTorch's forward reads
    architecture      the manifest's "architecture" entry of one model
    manifest_entries  the family's own top-level manifest entries ({} for none)
    shipped_draft     the draft shipped in models/ for a target, when the target is the one it was made for
    check_sources     the loaded models refused together (a draft made for another target)
"""

from __future__ import annotations

from ..source import Source


class Family:
    """The defaults every family shares; a family overrides what differs."""

    name = ""                 # how messages name the family ("a t5 draft for a t5 target")
    title = ""                # how the command line's description names it
    model_types: tuple = ()   # the config model_types it exports
    supported = ""            # the checkpoints it exports, in words (the error for an architecture no family takes)
    folders = ""              # the folders besides transformers checkpoints it reads, in words ("" for none)

    def takes(self, config) -> bool:
        """Whether this family exports a checkpoint of `config`."""
        return config.model_type in self.model_types and bool(getattr(config, "is_encoder_decoder", False))

    int8_stages = ("encoder", "decoder")      # the graphs --dtype int8 / --draft-dtype int8 quantize

    def transformers_folder(self, name: str) -> str | None:
        """Where a checkpoint of another format that this family reads (`folders`) is read as a transformers
        checkpoint (a conversion, made once and cached); None when `name` is not such a folder."""
        return None

    def refuse(self, opts, roles) -> None:
        """A one-line SpecdecError for export options (pipeline.ExportOptions) this family cannot honour for the
        models `roles`; nothing by default."""

    def load(self, name: str, role: str, config) -> Source:
        """The checkpoint `name` (config already read) loaded in fp32, eval mode, with its tokenizer."""
        raise NotImplementedError

    def graph_writer(self, source: Source, stage: str, dtype, opset: int, tree: bool, sharing: dict | None = None):
        """A function of a path that writes `source`'s encoder or decoder graph (`stage`) there. `tree`: the
        target's decoder, which verifies token trees; `sharing`: drafts (role -> model) whose cross K/V the target's
        encoder graph also gives (keeps_target_encoder)."""
        raise NotImplementedError

    def encoder_digests(self, sources: dict) -> dict:
        """role -> a digest of the model's encoder, for families whose drafts may keep the target's; {} here."""
        return {}

    def keeps_target_encoder(self, digests: dict) -> list:
        """The drafts whose encoder is the target's (they get no encoder graph of their own); none here."""
        return []

    def probe(self, source: Source):
        """The parity probe's inputs for `source` (export/check.py check_parity): None to use the probe's source
        ids for both the encoder graph and PyTorch, else a function of those ids returning (the encoder graph's
        input, PyTorch's forward keyword arguments)."""
        return None

    def architecture(self, config) -> dict:
        """The manifest's "architecture" entry of a model: the sizes the runtime makes its buffers from
        (runtime/loading/schema.py), and enough to tell which variant the model is."""
        raise NotImplementedError

    def shipped_draft(self, path: str, log) -> str | None:
        """The checkpoint of a draft shipped with the package for the target read at `path`, made when its weights
        are the ones the draft was made for (`log` says so); None here."""
        return None

    def check_sources(self, sources: dict) -> None:
        """A one-line SpecdecError for loaded models (role -> Source) that cannot be exported together; nothing
        here."""

    def manifest_entries(self, sources: dict, digests: dict) -> dict:
        """The family's own top-level manifest entries (name -> entry), from the loaded `sources` and the encoder
        `digests`; none here."""
        return {}
