"""Opening an export: its manifest checked, the draft export that belongs with it, the provider resolved, and one
session per model (eager or capturable graphs), before SpeculativeDecoder wraps them."""

from __future__ import annotations

import warnings
from pathlib import Path

from ..core.errors import SpecdecError, SpecdecWarning
from ..core.options import LoadOptions
from ..engine.capture import CapturedSeq2Seq
from ..engine.device import checked_provider_options, device_of, resolve_provider
from ..engine.int8cpu import PAIR_BOUND, cpu_kernel
from ..engine.model import CachedSeq2Seq
from ..families import family_class
from ..loading.manifest import load_manifest


def _belongs_together(target, draft) -> None:
    for what, a, b in (("tokenizer", target.files.get("tokenizer.json"), draft.files.get("tokenizer.json")),
                       ("vocabulary size", target.vocab_size, draft.vocab_size),
                       ("special token ids", target.special_ids, draft.special_ids),
                       ("dtype", target.dtype, draft.dtype)):
        if a != b:
            raise SpecdecError(f"draft export '{draft.root}' does not belong with target export '{target.root}' "
                               f"(not the same {what})", "export the pair together with one specdec-export run")
    if draft.max_length < target.max_length:
        raise SpecdecError(f"draft export '{draft.root}' has max_length {draft.max_length} < the target's "
                           f"{target.max_length}", "export the pair together with one specdec-export run")


def int8_kernel_note(manifest, kernel: str | None) -> SpecdecWarning | None:
    """What to tell a user whose CPU computes an int8 export otherwise than its parity check measured: an export
    whose int8 weights can saturate the kernel of x86 CPUs without VNNI (`kernel` "avx2"; exports made before the
    weight pairs were bounded record no `max_pair_sum`) may give other output there (runtime/engine/int8cpu.py).
    None when nothing differs: every export made since is checked for both kernels and computes the same on each."""
    if kernel != "avx2":
        return None

    def unbounded(role):
        record = manifest.raw["models"][role].get("quantization") or {}
        return manifest.models[role].weights == "int8" and any(
            int(stage.get("max_pair_sum", PAIR_BOUND + 1)) > PAIR_BOUND for stage in record.values())

    roles = [role for role in manifest.models if unbounded(role)]
    if not roles:
        return None
    effect = "its output may differ from the int8 target's checked output" if "target" in roles else \
        f"the {', '.join(roles)} may keep fewer guesses (the output stays the target's)"
    return SpecdecWarning(f"the int8 weights of '{manifest.root}' ({', '.join(roles)}) were made before specdec "
                          "bounded them for every CPU, and this CPU (x86 without VNNI) adds int8 products in int16 "
                          f"pairs that they can overflow: {effect}", "export it again with this specdec (its int8 "
                          "weights then compute the same on every CPU), or use fp32")


def open_export(export_dir: str | Path, options: LoadOptions | None = None) -> tuple:
    """(manifest, provider, target, draft models by name, datastore or None) of an export directory opened with
    `options` (checked here when they were not: every refusal a one-line SpecdecError; runtime/core/options.py says
    what each option does)."""
    options = (options or LoadOptions()).checked()
    draft, datastore, threads = options.draft, options.datastore, options.threads
    manifest = load_manifest(export_dir)
    note = int8_kernel_note(manifest, cpu_kernel())
    if note is not None:
        warnings.warn(note, stacklevel=2)
    draft_manifest = manifest
    if draft is not None:
        draft_manifest = load_manifest(draft)
        _belongs_together(manifest, draft_manifest)
        for family in (family_class(manifest), family_class(draft_manifest)):
            if family.drafts_apart is not None:
                raise SpecdecError(*family.drafts_apart)
    provider = resolve_provider(options.provider)
    session_options = checked_provider_options(options.provider_options)
    device = device_of(provider)
    model = CapturedSeq2Seq if options.graph_capture else CachedSeq2Seq
    target = model(manifest, "target", provider, device, manifest.gamma_max + 1, threads, options=session_options)
    models = {name: model(draft_manifest if name == "draft" else manifest, name, provider, device,
                          manifest.gamma_max + 2, threads or 1, max_length=manifest.max_length,
                          options=session_options)
              for name in manifest.drafts}
    for name in family_class(manifest).shared_encoders(manifest):
        target.share_encoder(models[name])
    store = None if datastore is False else manifest.datastore(None if datastore in (None, True) else datastore)
    return manifest, provider, target, models, store

