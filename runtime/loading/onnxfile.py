"""Read what the loader checks from an ONNX model file, without the `onnx` package: a minimal protobuf reader.

The runtime depends on onnxruntime, numpy and tokenizers only, so this module reads the protobuf wire format itself,
and only two things:
  - the main graph's inputs and outputs (name, element type, shape), which the loader compares with the manifest;
  - every tensor's external-data entries (location, offset, length), wherever a tensor can sit: graph initializers
    and sparse initializers, node attributes (Constant values, tensors lists), subgraphs of If/Loop/Scan at any
    depth, model-local functions and training information.
Why not let ONNX Runtime open the graph and check afterwards: the external data is read while the session is
created, so the check must come first. Why not load the session from bytes: ONNX Runtime resolves external-data
locations against the model's folder, which a session made from bytes does not have, and protobuf cannot hold a
model over 2 GiB in one buffer. So the loader checks the file here, then gives ONNX Runtime its (resolved) path.

The file is read in windows of WINDOW bytes (os.pread), never whole: fields that lead to neither (weights' raw_data,
doc strings, ...) are skipped by their length, so a scan reads little of a large file. (Not a memory map: a file that
shrinks while it is mapped kills the process with SIGBUS; here it is a GraphFileError.) Everything is bounds-checked:
a truncated or mangled file raises GraphFileError (never an IndexError, a huge allocation or a deep recursion);
fields this reader does not know are skipped like protobuf does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

MAX_DEPTH = 48          # nested messages (a subgraph inside a node inside a graph is 3 levels)
MAX_TEXT = 1 << 16      # bytes of one name, key or location
WINDOW = 1 << 20
MAX_TENSORS = 1 << 20   # tensors with external data, more is not a model
ELEM_TYPES = {1: "float32", 2: "uint8", 3: "int8", 5: "int16", 6: "int32", 7: "int64", 9: "bool", 10: "float16",
              11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16"}   # the names export/manifest.py writes

# message kind -> {field number: message kind}: the fields on the way to tensors (onnx.proto field numbers)
_CHILDREN = {
    "model": {7: "graph", 20: "training", 25: "function"},       # ModelProto.graph, training_info, functions
    "training": {1: "graph", 2: "graph"},                         # TrainingInfoProto.initialization, algorithm
    "function": {7: "node"},                                      # FunctionProto.node
    "graph": {1: "node", 5: "tensor", 15: "sparse"},              # GraphProto.node, initializer, sparse_initializer
    "node": {5: "attribute"},                                     # NodeProto.attribute
    "attribute": {5: "tensor", 6: "graph", 10: "tensor", 11: "graph", 22: "sparse", 23: "sparse"},  # t g tensors
    "sparse": {1: "tensor", 2: "tensor"},                         # SparseTensorProto.values, indices   graphs ...
}
_EXTERNAL = 1           # TensorProto.DataLocation.EXTERNAL


class GraphFileError(Exception):
    """The file is not a readable ONNX model (the message says where the reading stopped)."""


@dataclass
class ValueInfo:
    name: str
    dtype: str          # ELEM_TYPES name, the number as a string for other types, "non-tensor" for sequences etc.
    shape: tuple        # ints, names of symbolic axes, "?" for unnamed ones (as export/manifest.py writes them)


@dataclass
class ExternalData:
    tensor: str
    location: str | None
    offset: int | None
    length: int | None
    bad_number: str = ""        # the key of an offset or length that is not a decimal integer


@dataclass
class GraphFile:
    inputs: list = field(default_factory=list)          # ValueInfo of the main graph
    outputs: list = field(default_factory=list)
    external: list = field(default_factory=list)        # ExternalData of every tensor stored outside the file
    has_graph: bool = False


class _Reader:
    def __init__(self, fd: int, size: int):
        self.fd, self.size = fd, size
        self.data, self.base = b"", 0          # the window: bytes [base, base + len(data)) of the file

    def _load(self, pos: int, count: int = WINDOW) -> None:
        self.data, self.base = os.pread(self.fd, count, pos), pos
        if len(self.data) < min(count, self.size - pos):
            raise GraphFileError(f"the file changed while it was read (byte {pos})")

    def varint(self, pos: int, end: int) -> tuple[int, int]:
        i = pos - self.base
        if i < 0 or (i + 10 > len(self.data) and self.base + len(self.data) < self.size):
            self._load(pos)
            i = 0
        data = self.data                        # holds 10 bytes from pos, or everything up to the end of the file
        value, shift = 0, 0
        while True:
            if pos >= end:
                raise GraphFileError(f"a number runs past the end of its field (byte {pos})")
            byte = data[i]
            pos, i = pos + 1, i + 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value, pos
            shift += 7
            if shift >= 70:
                raise GraphFileError(f"a number longer than 10 bytes (byte {pos})")

    def read(self, start: int, end: int) -> bytes:
        """Bytes [start, end) of the file (inside the bounds the caller checked)."""
        if end - start > MAX_TEXT:
            raise GraphFileError(f"a name of {end - start} bytes (byte {start})")
        if start < self.base or end > self.base + len(self.data):
            self._load(start)
        return self.data[start - self.base:end - self.base]

    def fields(self, start: int, end: int):
        """(field number, wire type, value) of one message: an int, or (start, end) of a length-delimited field."""
        pos = start
        while pos < end:
            key, pos = self.varint(pos, end)
            number, wire = key >> 3, key & 7
            if number == 0:
                raise GraphFileError(f"field number 0 (byte {pos})")
            if wire == 0:
                value, pos = self.varint(pos, end)
            elif wire == 2:
                size, pos = self.varint(pos, end)
                if size > end - pos:
                    raise GraphFileError(f"a field of {size} bytes runs past the end of its message (byte {pos})")
                value, pos = (pos, pos + size), pos + size
            elif wire in (1, 5):
                width = 8 if wire == 1 else 4
                if width > end - pos:
                    raise GraphFileError(f"a fixed-size field runs past the end (byte {pos})")
                value, pos = int.from_bytes(self.read(pos, pos + width), "little"), pos + width
            else:       # 3, 4 (groups: never written by ONNX) and 6, 7 (undefined)
                raise GraphFileError(f"wire type {wire} (byte {pos})")
            yield number, wire, value

    def text(self, span) -> str:
        return self.read(*span).decode("utf-8", "replace")


def _int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _value_info(r: _Reader, span) -> ValueInfo:
    name, dtype, shape = "", "non-tensor", []
    for number, wire, value in r.fields(*span):
        if number == 1 and wire == 2:                       # ValueInfoProto.name
            name = r.text(value)
        elif number == 2 and wire == 2:                     # ValueInfoProto.type (TypeProto)
            for t_number, t_wire, t_value in r.fields(*value):
                if t_number != 1 or t_wire != 2:            # TypeProto.tensor_type only
                    continue
                dtype, shape = "0", []
                for n, w, v in r.fields(*t_value):
                    if n == 1 and w == 0:                   # Tensor.elem_type
                        dtype = ELEM_TYPES.get(v, str(_int64(v)))
                    elif n == 2 and w == 2:                 # Tensor.shape (TensorShapeProto)
                        for d_number, d_wire, d_value in r.fields(*v):
                            if d_number == 1 and d_wire == 2:       # TensorShapeProto.dim
                                dim = "?"
                                for dn, dw, dv in r.fields(*d_value):
                                    if dn == 1 and dw == 0:
                                        dim = _int64(dv)
                                    elif dn == 2 and dw == 2:
                                        dim = r.text(dv) or "?"
                                shape.append(dim)
    return ValueInfo(name, dtype, tuple(shape))


def _tensor(r: _Reader, span, out: GraphFile) -> None:
    name, location, entries = "", 0, {}
    for number, wire, value in r.fields(*span):
        if number == 8 and wire == 2:                       # TensorProto.name
            name = r.text(value)
        elif number == 14 and wire == 0:                    # TensorProto.data_location
            location = value
        elif number == 13 and wire == 2:                    # TensorProto.external_data (key, value)
            key = text = ""
            for n, w, v in r.fields(*value):
                if n == 1 and w == 2:
                    key = r.text(v)
                elif n == 2 and w == 2:
                    text = r.text(v)
            entries[key] = text
    if location != _EXTERNAL and not entries:
        return
    if len(out.external) >= MAX_TENSORS:
        raise GraphFileError(f"more than {MAX_TENSORS} tensors with external data")
    numbers, bad = {}, ""
    for key in ("offset", "length"):
        text = entries.get(key)
        if text is None:
            numbers[key] = None
        elif text.isascii() and text.isdigit() and len(text) <= 20:
            numbers[key] = int(text)
        else:
            numbers[key], bad = None, bad or key
    out.external.append(ExternalData(name, entries.get("location"), numbers["offset"], numbers["length"], bad))


def _walk(r: _Reader, kind: str, span, out: GraphFile, depth: int, main: bool) -> None:
    if depth > MAX_DEPTH:
        raise GraphFileError(f"messages nested more than {MAX_DEPTH} deep")
    children = _CHILDREN[kind]
    for number, wire, value in r.fields(*span):
        if wire != 2:
            continue
        if kind == "graph" and main and number in (11, 12):     # GraphProto.input, output of the main graph
            (out.inputs if number == 11 else out.outputs).append(_value_info(r, value))
            continue
        child = children.get(number)
        if child == "tensor":
            _tensor(r, value, out)
        elif child is not None:
            if kind == "model" and child == "graph":
                out.has_graph = True
            _walk(r, child, value, out, depth + 1, main=kind == "model" and child == "graph")


def read_graph_file(path: Path) -> GraphFile:
    """The main graph's inputs and outputs and every external-data reference of the ONNX file at `path`.
    Raises GraphFileError for a file that is not a readable ONNX model, OSError if it cannot be read."""
    out = GraphFile()
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            raise GraphFileError("the file is empty")
        _walk(_Reader(fh.fileno(), size), "model", (0, size), out, 0, main=False)
    if not out.has_graph:
        raise GraphFileError("the file holds no graph")
    return out
