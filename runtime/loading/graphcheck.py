"""The graph files of an export agree with its manifest, and their external data stays inside the export.

Run by the manifest loader after the checksums and before ONNX Runtime opens any graph. For each graph file it
reads (onnxfile.py) the main graph's inputs and outputs and every external-data reference, and checks:
  - the inputs and outputs are exactly those the manifest lists (names, dtypes, shapes), so the checks that
    validate.py made on the manifest's entries hold for the graph that will run;
  - every external-data location is a plain relative path inside the graph's own folder after resolving symlinks
    (confine.py; ONNX Runtime reads external data from that folder only), names a file among the manifest's
    checksummed `files`, and its offset and length are decimal integers that stay inside that file.
Each problem is one SpecdecError line naming the graph file and the fix.
"""

from __future__ import annotations

import os

from ..core.errors import SpecdecError
from .confine import inside, shown
from .onnxfile import GraphFileError, read_graph_file

FIX = "re-run specdec-export, or copy the export again from a trusted source"


def check_graph_files(manifest) -> None:
    for role, info in manifest.models.items():
        for kind, graph in (("encoder", info.encoder), ("decoder", info.decoder)):
            if graph is not None:          # no encoder: a draft that keeps the target's (validate.py checked that)
                check_graph_file(manifest, f"the {role} {kind} graph {shown(graph.file)}", graph)
        for kind, graph in (info.capture or {}).items():
            check_graph_file(manifest, f"the {role} {kind} graph {shown(graph.file)}", graph)
    if manifest.cross_pad is not None:
        check_graph_file(manifest, f"the cross_pad graph {shown(manifest.cross_pad.file)}", manifest.cross_pad)


def check_graph_file(manifest, what: str, graph) -> None:
    path = manifest.path(graph.file)
    try:
        scan = read_graph_file(path)
    except GraphFileError as err:
        raise SpecdecError(f"{what} is not a valid ONNX file ({err})", FIX) from None
    for side, listed, found in (("input", graph.inputs, scan.inputs), ("output", graph.outputs, scan.outputs)):
        actual = {v.name: (v.dtype, tuple(v.shape)) for v in found}
        wanted = {t.name: (t.dtype, tuple(t.shape)) for t in listed.values()}
        if len(actual) != len(found):
            raise SpecdecError(f"{what} has two {side}s of one name", FIX)
        for name in sorted(set(actual) | set(wanted), key=str):
            if name not in actual or name not in wanted:
                where, other = ("manifest.json", "the graph") if name in wanted else ("the graph", "manifest.json")
                raise SpecdecError(f"{what} does not match manifest.json: {where} lists {side} {shown(name)}, "
                                   f"{other} does not", FIX)
            if actual[name] != wanted[name]:
                raise SpecdecError(f"{what} does not match manifest.json: its {side} {shown(name)} is "
                                   f"{_describe(actual[name])} in the graph, {_describe(wanted[name])} in the "
                                   "manifest", FIX)
    folder = graph.file.rpartition("/")[0]
    sizes = {}
    for ext in scan.external:
        tensor = shown(ext.tensor, 60)
        if ext.location is None:
            raise SpecdecError(f"{what}: tensor {tensor} is stored outside the file but names no location", FIX)
        if ext.bad_number:
            raise SpecdecError(f"{what}: the external data {ext.bad_number} of tensor {tensor} is not a decimal "
                               "integer", FIX)
        real = inside(manifest.root, ext.location, f"{what}: the external data location of tensor {tensor}",
                      base=folder)
        relative = f"{folder}/{ext.location}" if folder else ext.location
        if relative not in manifest.files:
            raise SpecdecError(f"{what}: the external data file {shown(relative)} of tensor {tensor} is not among "
                               "manifest.json's checksummed files", FIX)
        if relative not in sizes:
            sizes[relative] = os.stat(real).st_size
        offset, length = ext.offset or 0, ext.length
        if offset > sizes[relative] or (length is not None and offset + length > sizes[relative]):
            raise SpecdecError(f"{what}: tensor {tensor} reads bytes {offset}..{offset + (length or 0)} of "
                               f"{shown(relative)}, which has {sizes[relative]}", FIX)


def _describe(info: tuple) -> str:
    dtype, shape = info
    return f"{shown(dtype, 20)} {shown(list(shape), 60)}"
