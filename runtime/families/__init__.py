"""Model families at run time: what differs between exports of different architectures, chosen once from the
manifest (`family_of`). A family checks a request's input (a prompt text or token ids, or its own keywords), says
whether a batch can run it, and decodes input longer than the encoder's window. Adding a family is one module here
beside text.py and whisper.py, and its entry in `family_of`; the export side has its own (export/families/)."""

from __future__ import annotations

from ..core.errors import SpecdecError
from .text import TextFamily
from .whisper import WhisperFamily

# the request keywords a family's input may take besides a prompt or input_ids: every family's, so that an export of
# another family refuses them with its one line instead of as unknown parameters
INPUTS = tuple(dict.fromkeys(TextFamily.inputs + WhisperFamily.inputs))


FAMILIES = (TextFamily, WhisperFamily)


def refuse_foreign(family, given: dict) -> None:
    """A one-line SpecdecError, in the words of the family that takes them, when a request passes another family's
    input keywords (one left at its default, None or False, is no request for it)."""
    passed = [name for name, value in given.items() if value is not None and value is not False]
    for name in passed:
        if name not in family.inputs:
            owner = next(f for f in FAMILIES if name in f.inputs)
            raise SpecdecError(*owner.foreign)


def family_class(manifest):
    """The family of a checked manifest: Whisper when it carries a "speech" entry, text (T5) otherwise."""
    return WhisperFamily if manifest.speech is not None else TextFamily


def family_inputs(manifest) -> tuple:
    """The request keywords an export's family takes besides a prompt or input_ids (() for a text export): what a
    surface (a command line, serving, the C API) offers for this export."""
    return family_class(manifest).inputs


def family_of(manifest, tokenizer, start_id: int, eos_id: int):
    """The family object that checks a decoder's requests (family_class's, made for this export)."""
    return family_class(manifest)(manifest, tokenizer, start_id, eos_id)
