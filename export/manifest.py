"""Write manifest.json for an export directory. Its keys are declared in runtime/loading/schema.py, and every entry
is built through it; the reader is runtime/loading/manifest.py, the validator runtime/loading/validate.py."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

from specdec import __version__
from specdec.runtime.loading.manifest import sha256_file
from specdec.runtime.loading.schema import (ARCHITECTURE, FORMAT, FORMAT_VERSION, GRAPH, GRAPH_CAPTURE, MANIFEST, MODEL,
                                           SPECIAL_IDS, TENSOR, TOP, build)

_ONNX_DTYPES = {1: "float32", 10: "float16", 7: "int64", 6: "int32", 9: "bool"}


def graph_entry(root: Path, relative: str) -> dict:
    """File, input and output names, dtypes and shapes (symbolic axes as names) of one ONNX graph."""
    import onnx

    model = onnx.load(str(root / relative), load_external_data=False)

    def describe(values):
        out = []
        for v in values:
            t = v.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim]
            out.append(build(TENSOR, f"{relative} tensor", name=v.name,
                             dtype=_ONNX_DTYPES.get(t.elem_type, str(t.elem_type)), shape=dims))
        return out

    return build(GRAPH, relative, file=relative, inputs=describe(model.graph.input),
                 outputs=describe(model.graph.output))


def write_manifest(root: Path, *, models: dict, head: dict, tokenizer_file: str, special_ids: dict,
                   vocab_size: int, gamma_max: int, max_length: int, dtype: str, checks: dict,
                   datastore: str | None = None, entries: dict | None = None,
                   graph_capture: dict | None = None) -> Path:
    """`models`: role -> {"source", "revision", "architecture" (the family's entry), "graphs": {"encoder": rel,
    "decoder": rel, and with `graph_capture` "capture_decoder" and "capture_head"}, and "weights", "quantization"
    when given}; `entries`: the family's own top-level entries (export/families/); `graph_capture`: {"cross_pad":
    rel, "cache_capacity", "source_capacity", "token_slots", "attention"} (export/capture.py)."""
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != MANIFEST
                   and not p.name.startswith("."))
    entry = build(
        TOP, "the manifest",
        format=FORMAT,
        format_version=FORMAT_VERSION,
        specdec_version=__version__,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        gamma_max=gamma_max,
        max_length=max_length,
        dtype=dtype,
        vocab_size=vocab_size,
        special_ids=build(SPECIAL_IDS, "special_ids", **special_ids),
        tokenizer=tokenizer_file,
        **({"datastore": datastore} if datastore else {}),
        **(entries or {}),
        **({"graph_capture": build(GRAPH_CAPTURE, "graph_capture", **{
            **graph_capture, "cross_pad": graph_entry(root, graph_capture["cross_pad"])})} if graph_capture else {}),
        models={
            role: build(MODEL, f"model {role}", source=m["source"], revision=m["revision"],
                        architecture=build(ARCHITECTURE, f"model {role} architecture", **m["architecture"]),
                        weights=m.get("weights", dtype),
                        **({"quantization": m["quantization"]} if m.get("quantization") else {}),
                        **({"vocabulary": m["vocabulary"]} if m.get("vocabulary") else {}),
                        graphs={kind: graph_entry(root, rel) for kind, rel in m["graphs"].items()})
            for role, m in models.items()},
        head=head,
        parity_check=checks,
        files={rel: sha256_file(root / rel) for rel in files},
    )
    path = root / MANIFEST
    path.write_text(json.dumps(entry, indent=2) + "\n")
    return path
