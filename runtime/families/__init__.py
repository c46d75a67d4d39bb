"""Model families at run time: what differs between exports of different architectures, chosen once from the
manifest (`family_of`). A family checks a request's input (a prompt text or token ids, or audio), says whether a
batch can run it, and decodes input longer than the encoder's window. Adding a family is one module here beside
text.py and whisper.py, and its entry in `family_of`; the export side has its own (export/families/)."""

from __future__ import annotations

from .text import TextFamily
from .whisper import WhisperFamily

# the request keywords a family's input may take besides a prompt or input_ids (generate(audio=..., ...)): every
# family's, so that an export of another family refuses them with its one line instead of as unknown parameters
INPUTS = tuple(dict.fromkeys(TextFamily.inputs + WhisperFamily.inputs))


def family_inputs(manifest) -> tuple:
    """The request keywords an export's family takes besides a prompt or input_ids (() for a text export): what a
    surface (a command line, serving, the C API) offers for this export."""
    return (WhisperFamily if manifest.speech is not None else TextFamily).inputs


def family_of(manifest, tokenizer, start_id: int, eos_id: int):
    """The family of a checked manifest: Whisper when it carries a "speech" entry, text (T5) otherwise."""
    family = WhisperFamily if manifest.speech is not None else TextFamily
    return family(manifest, tokenizer, start_id, eos_id)
