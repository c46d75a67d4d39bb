"""The Python side of libspecdec (include/specdec.h): cffi `extern "Python"` functions that convert C arguments to
Python, call specdec.runtime's public API (SpeculativeDecoder.generate and .stream, given one Params built from
the C struct, and .decode), and convert results and exceptions back to C. No decoding logic lives here.

Loaded by the embedded interpreter's init code (bindings/build.py), which calls install(ffi, lib) with the
libspecdec module's own ffi and lib. Every function runs on the C caller's thread.

Sessions are plain integers cast to `specdec_session *` (never dereferenced, never reused), so a closed handle is
recognised instead of touching freed memory. Each session has a lock: calls on one session are serialized, calls
on different sessions run concurrently (ONNX Runtime releases the GIL while it runs).

specdec_params and specdec_stats are versioned (specdec.h): the C side (capi.c) has checked their struct_size
before anything here runs; this side reads and writes only the fields that lie wholly inside it, and a params
field outside it takes the Params default.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import json
import threading
from pathlib import Path

from specdec.runtime import Params, SpecdecError, SpeculativeDecoder, Stats
from specdec.runtime.core.params import DECLARED
from specdec.runtime.core.options import LoadOptions
from specdec.runtime.engine.device import resolve_provider
from specdec.runtime.core.errors import RunFailed, first_line, one_line_warnings

from specdec.bindings._failure import Failure

one_line_warnings()     # a C program's stderr gets 'warning: ...' lines, as the command lines print them

# The C calls a model family has of its own (specdec.h's) are in a module beside this one named _capi_<family>.py,
# which holds its EXTERNS (attached with the table below), its CDEF (the declarations bindings/build.py gives cffi)
# and CALLS, a mixin of CApi with the calls' bodies. They are found by their file names, so this module names none.
FAMILY_MODULES = tuple(importlib.import_module(f"{__package__}.{path.stem}")
                       for path in sorted(Path(__file__).parent.glob("_capi_*.py")))

# extern "Python" functions: C name of the public entry point -> private name that cffi binds
EXTERNS = {
    "specdec_open": "_specdec_py_open",
    "specdec_close": "_specdec_py_close",
    "specdec_get_info": "_specdec_py_get_info",
    "specdec_generate_ids": "_specdec_py_generate_ids",
    "specdec_generate_text": "_specdec_py_generate_text",
    "specdec_stream": "_specdec_py_stream",
    "specdec_generate_sequences": "_specdec_py_generate_sequences",
    "specdec_decode": "_specdec_py_decode",
}

# Numbers of a field whose numbers stand for words that C refuses in C's words, before Params.checked sees them: a
# negative gamma other than SPECDEC_GAMMA_AUTO, an early_stopping outside specdec_early_stopping ("{}": the value).
C_REFUSALS = {
    "gamma": (lambda value: value < 0,
              "gamma must be SPECDEC_GAMMA_AUTO (-1) or an integer in 0..gamma_max (got {})",
              "use -1 for auto, or 0 <= gamma <= the export's gamma_max (specdec_get_info)"),
    "early_stopping": (lambda value: True,
                       "early_stopping must be SPECDEC_EARLY_STOPPING_FALSE (0), _TRUE (1) or _NEVER (2) (got {})",
                       "use a specdec_early_stopping value"),
}


def open_options(text: str) -> LoadOptions:
    """specdec_open's options_json (NULL or "" for the defaults) as LoadOptions: a JSON object whose keys are the
    load options declared for C (runtime/core/options.py); not JSON, not an object, an unknown key, a value of
    another JSON type or out of range is a one-line SpecdecError."""
    if not text.strip():
        return LoadOptions()
    example = 'e.g. {"provider": "cpu", "threads": 2}'
    try:
        options = json.loads(text)
    except json.JSONDecodeError as err:
        raise SpecdecError(f"options_json is not valid JSON ({err.msg} at character {err.pos})",
                           f"pass a JSON object, {example}, or NULL") from None
    if not isinstance(options, dict):
        raise SpecdecError("options_json is not a JSON object", f"pass a JSON object, {example}, or NULL")
    return LoadOptions.from_config(options, "c", "options_json")


class _Session:
    __slots__ = ("decoder", "lock", "owner")

    def __init__(self, decoder):
        self.decoder = decoder
        self.lock = threading.Lock()
        self.owner = None            # threading.get_ident() of the thread inside a call, else None


def one_line(text: str, limit: int) -> bytes:
    """`text` as one line of UTF-8 shorter than `limit` bytes (cut at a character boundary, ending in '...')."""
    data = " ".join(str(text).split("\n")).replace("\r", " ").encode("utf-8", "replace")
    if len(data) < limit:
        return data
    return data[:limit - 4].decode("utf-8", "ignore").encode("utf-8") + b"..."


class _FamilyChecks:
    """The end of the chain of the families' checks (each CALLS may define them and then ask the next one)."""

    def _takes_prompts(self, dec) -> None:
        """The text calls on a session of a family that takes no prompt: refused in C's words by that family's
        CALLS; a text session takes them."""


class CApi(*(module.CALLS for module in FAMILY_MODULES), _FamilyChecks):
    def __init__(self, ffi, lib):
        self.ffi, self.lib = ffi, lib
        self.sessions: dict[int, _Session] = {}
        self.ids = itertools.count(1)
        self.registry_lock = threading.Lock()
        self.stop_reasons = {"": lib.SPECDEC_STOP_NONE, "eos": lib.SPECDEC_STOP_EOS,
                             "max_new_tokens": lib.SPECDEC_STOP_MAX_NEW_TOKENS,
                             "max_length": lib.SPECDEC_STOP_MAX_LENGTH, "callback": lib.SPECDEC_STOP_CALLBACK}
        self.params_fields = self._field_ends("specdec_params")
        self.stats_fields = self._field_ends("specdec_stats")

    def _field_ends(self, struct: str) -> dict:
        """{field: offset just past it} of a versioned struct, struct_size left out: a field is in the caller's
        struct iff its end <= the caller's struct_size."""
        return {name: field.offset + self.ffi.sizeof(field.type)
                for name, field in self.ffi.typeof(struct).fields if name != "struct_size"}

    # -- plumbing ---------------------------------------------------------------------------------------------
    def install(self) -> None:
        families = {c_name: extern for module in FAMILY_MODULES for c_name, extern in module.EXTERNS.items()}
        for c_name, extern in {**EXTERNS, **families}.items():
            body = getattr(self, c_name[len("specdec_"):])
            self.ffi.def_extern(name=extern, error=self.lib.SPECDEC_E_INTERNAL)(self._entry(c_name, body))

    def _entry(self, c_name, body):
        lib = self.lib

        def entry(*args):
            try:
                body(*args)
                return lib.SPECDEC_OK
            except Failure as failure:
                status, message = failure.status, str(failure)
            except RunFailed as err:
                status, message = lib.SPECDEC_E_RUNTIME, str(err)
            except SpecdecError as err:
                status, message = lib.SPECDEC_E_INVALID_ARGUMENT, str(err)
            except BaseException as err:  # noqa: BLE001 -- nothing may reach cffi (it would print, return 0 = OK)
                status, message = classify(err, lib)
            try:
                lib._specdec_set_error(one_line(f"{c_name}: {message}", lib.SPECDEC_ERROR_MAX))
            except BaseException:  # noqa: BLE001, S110 -- the status still tells the caller what happened
                pass
            return status

        entry.__name__ = c_name
        return entry

    def _text(self, ptr, what: str) -> str:
        try:
            return self.ffi.string(ptr).decode("utf-8")
        except UnicodeDecodeError:
            raise Failure(self.lib.SPECDEC_E_INVALID_ARGUMENT, f"{what} is not valid UTF-8",
                          "pass NUL-terminated UTF-8") from None

    def _session(self, ptr) -> _Session:
        if ptr == self.ffi.NULL:
            raise Failure(self.lib.SPECDEC_E_INVALID_ARGUMENT, "session is NULL", "pass a session from specdec_open")
        session = self.sessions.get(int(self.ffi.cast("uintptr_t", ptr)))
        if session is None:
            raise Failure(self.lib.SPECDEC_E_INVALID_ARGUMENT,
                          "session is not open (closed already, or not from specdec_open)",
                          "using a session after specdec_close is undefined behaviour; open a new one")
        return session

    @contextlib.contextmanager
    def _hold(self, session: _Session):
        """The session's decoder, held for this thread (other threads wait; a nested call is refused)."""
        me = threading.get_ident()
        if session.owner == me:
            raise Failure(self.lib.SPECDEC_E_BUSY, "the session is already in a call on this thread (a call from "
                          "inside its own stream callback)", "use another session, or call after specdec_stream "
                          "returns")
        with session.lock:
            if session.decoder is None:
                raise Failure(self.lib.SPECDEC_E_INVALID_ARGUMENT, "the session was closed while this call waited "
                              "for it", "do not close a session that other threads still use")
            session.owner = me
            try:
                yield session.decoder
            finally:
                session.owner = None

    @contextlib.contextmanager
    def _prompted(self, session: _Session, prompt, input_ids, n_input: int, params):
        """A text call's request read from C, then the session's decoder held for it (a session of a family that
        takes no prompt refused): yields (decoder, prompt text or None for NULL, input ids or None for NULL,
        Params)."""
        text = None if prompt == self.ffi.NULL else self._text(prompt, "prompt")
        ids = self._input_ids(input_ids, n_input)
        request = self._params(params)
        with self._hold(session) as dec:
            self._takes_prompts(dec)
            yield dec, text, ids, request

    def _params(self, ptr) -> Params:
        """The one Params of a request, from the C struct (NULL: the defaults, which specdec_params_default() equals).
        Only the fields inside the caller's struct_size are read; the others keep their Params defaults. Values are
        checked by the runtime (Params.checked, and the draft name when the decoder picks the source), so the C API
        and Python accept and refuse exactly the same ones."""
        if ptr == self.ffi.NULL:
            return Params()
        size = int(ptr.struct_size)
        given = {name: getattr(ptr, name) for name, end in self.params_fields.items() if end <= size}
        return Params.of(**{name: self._param(DECLARED[name], value) for name, value in given.items()})

    def _param(self, declared, value):
        """One specdec_params field as the Python value its declaration (runtime/core/params.py) says: a string
        field's NULL is the default, a number in the declaration's c_values is the word it stands for (gamma -1:
        "auto", early_stopping 0/1/2: False/True/"never"), anything else its int or float."""
        if declared.c_type == "const char *":
            return declared.default if value == self.ffi.NULL else self._text(value, f"params.{declared.name}")
        if declared.c_type == "double":
            return float(value)
        value, words = int(value), dict(declared.c_values)
        if value in words:
            return words[value]
        refused, problem, fix = C_REFUSALS.get(declared.name, (lambda v: False, "", ""))
        if refused(value):
            raise Failure(self.lib.SPECDEC_E_INVALID_ARGUMENT, problem.format(value), fix)
        return value

    def _input_ids(self, ptr, count: int):
        if ptr == self.ffi.NULL:
            if count:
                raise Failure(self.lib.SPECDEC_E_INVALID_ARGUMENT, f"input_ids is NULL but n_input is {count}",
                              "pass the token ids, or n_input 0 with no ids")
            return None
        return self.ffi.unpack(ptr, count) if count else []

    def _out_buffer(self, buf, capacity: int, out_len, what: str) -> None:
        if out_len == self.ffi.NULL:
            raise Failure(self.lib.SPECDEC_E_INVALID_ARGUMENT, "out_len is NULL",
                          "pass the address of a size_t to receive the output length")
        if buf == self.ffi.NULL and capacity:
            raise Failure(self.lib.SPECDEC_E_INVALID_ARGUMENT, f"{what} is NULL but out_capacity is {capacity}",
                          "pass a buffer of out_capacity elements, or out_capacity 0 to measure only")

    def _fill_stats(self, out, stats, stop_reason: str) -> None:
        """Write the C stats: only the fields inside the caller's struct_size (capi.c has zeroed those already)."""
        if out == self.ffi.NULL:
            return
        values = stats.figures()          # the declared figures (runtime/core/stats.py): the struct's fields
        values["stop_reason"] = self.stop_reasons.get(stop_reason, self.lib.SPECDEC_STOP_NONE)
        size = int(out.struct_size)
        for name, end in self.stats_fields.items():
            if end <= size:
                setattr(out, name, values[name])

    def _give_ids(self, res, out_ids, out_capacity: int, out_len, out_stats) -> None:
        """A Result's token ids into the caller's buffer (its length and stats first: out_capacity 0 measures)."""
        count = len(res.token_ids)
        out_len[0] = count
        self._fill_stats(out_stats, res.stats, res.stop_reason)
        if count > out_capacity:
            raise self._too_small(out_capacity, count, "ids")
        out_ids[0:count] = res.token_ids

    def _give_text(self, data: bytes, out_text, out_capacity: int, out_len) -> None:
        """UTF-8 text into the caller's buffer, NUL-terminated (its length first: out_capacity 0 measures)."""
        out_len[0] = len(data)
        if len(data) + 1 > out_capacity:
            raise self._too_small(out_capacity, len(data) + 1, "bytes (with the NUL)")
        self.ffi.memmove(out_text, data + b"\0", len(data) + 1)

    def _too_small(self, capacity: int, needed: int, unit: str) -> Failure:
        return Failure(self.lib.SPECDEC_E_BUFFER_TOO_SMALL,
                       f"the output needs {needed} {unit} but out_capacity is {capacity}",
                       f"call again with out_capacity >= {needed} (same params and seed give the same output)")

    # -- the API ------------------------------------------------------------------------------------------------
    def open(self, export_dir, options_json, out_session) -> None:
        lib, ffi = self.lib, self.ffi
        if out_session == ffi.NULL:
            raise Failure(lib.SPECDEC_E_INVALID_ARGUMENT, "out_session is NULL",
                          "pass the address of a specdec_session * to receive the session")
        if export_dir == ffi.NULL:
            raise Failure(lib.SPECDEC_E_INVALID_ARGUMENT, "export_dir is NULL",
                          "pass the path of a directory made by specdec-export")
        path = self._text(export_dir, "export_dir")
        options = self._options(options_json)
        try:
            provider = resolve_provider(options.provider)
        except SpecdecError as err:
            raise Failure(lib.SPECDEC_E_PROVIDER, str(err)) from None
        try:
            decoder = SpeculativeDecoder.load(path, options, provider=provider)
        except SpecdecError as err:
            raise Failure(lib.SPECDEC_E_EXPORT, str(err)) from None
        except OSError as err:     # e.g. ENAMETOOLONG, EACCES while reading the directory
            raise Failure(lib.SPECDEC_E_EXPORT, f"cannot read export directory ({type(err).__name__}: "
                          f"{err.strerror or err})", "check the path and its permissions") from None
        with self.registry_lock:
            handle = next(self.ids)
            self.sessions[handle] = _Session(decoder)
        out_session[0] = ffi.cast("specdec_session *", handle)

    def _options(self, options_json) -> LoadOptions:
        text = "" if options_json == self.ffi.NULL else self._text(options_json, "options_json")
        try:
            return open_options(text)
        except SpecdecError as err:
            raise Failure(self.lib.SPECDEC_E_INVALID_ARGUMENT, err.problem, err.fix) from None

    def close(self, ptr) -> None:
        session = self._session(ptr)
        if session.owner == threading.get_ident():
            raise Failure(self.lib.SPECDEC_E_BUSY, "specdec_close was called from inside the session's own "
                          "stream callback; the session stays open", "close it after specdec_stream returns")
        with session.lock:                 # waits for a call in progress on another thread
            with self.registry_lock:
                self.sessions.pop(int(self.ffi.cast("uintptr_t", ptr)), None)
            session.decoder = None         # releases the ONNX Runtime sessions and buffers

    def get_info(self, ptr, out_info) -> None:
        session = self._session(ptr)
        if out_info == self.ffi.NULL:
            raise Failure(self.lib.SPECDEC_E_INVALID_ARGUMENT, "out_info is NULL",
                          "pass the address of a specdec_session_info")
        with self._hold(session) as dec:
            out_info.gamma_max, out_info.max_length = int(dec.gamma_max), int(dec.max_length)
            out_info.vocab_size, out_info.eos_token_id = int(dec.vocab_size), int(dec.eos_id)
            name = str(dec.provider).encode("ascii")[:15]
            self.ffi.memmove(out_info.provider, name + b"\0", len(name) + 1)

    def generate_ids(self, ptr, input_ids, n_input, params, out_ids, out_capacity, out_len, out_stats) -> None:
        session = self._session(ptr)
        self._out_buffer(out_ids, out_capacity, out_len, "out_ids")
        with self._prompted(session, self.ffi.NULL, input_ids, n_input, params) as (dec, _, ids, request):
            res = dec.generate(input_ids=[] if ids is None else ids, params=request)
        self._give_ids(res, out_ids, out_capacity, out_len, out_stats)

    def generate_text(self, ptr, prompt, params, out_text, out_capacity, out_len, out_stats) -> None:
        session = self._session(ptr)
        self._out_buffer(out_text, out_capacity, out_len, "out_text")
        if prompt == self.ffi.NULL:
            raise Failure(self.lib.SPECDEC_E_INVALID_ARGUMENT, "prompt is NULL", "pass the prompt text")
        with self._prompted(session, prompt, self.ffi.NULL, 0, params) as (dec, text, _, request):
            res = dec.generate(text, params=request)
        self._fill_stats(out_stats, res.stats, res.stop_reason)
        self._give_text(res.text.encode("utf-8"), out_text, out_capacity, out_len)

    def stream(self, ptr, prompt, input_ids, n_input, params, on_piece, user_data, out_stats) -> None:
        ffi = self.ffi
        session = self._session(ptr)
        if on_piece == ffi.NULL:
            raise Failure(self.lib.SPECDEC_E_INVALID_ARGUMENT, "on_piece is NULL",
                          "pass a callback; use specdec_generate_ids or _text to generate without one")
        with self._prompted(session, prompt, input_ids, n_input, params) as (dec, text, ids, request):
            if request.num_beams != 1:
                request.checked(dec.gamma_max)          # an invalid num_beams is refused as Python refuses it
                raise Failure(self.lib.SPECDEC_E_INVALID_ARGUMENT, "beam search cannot stream: every beam may still "
                              "lose until the search ends", "use specdec_generate_sequences (or _ids, _text) with "
                              "num_beams > 1, or stream with num_beams 1")
            # The public SpeculativeDecoder.stream(): each Piece carries its ids, its text, the request's stats so
            # far and (on the last one) the stop reason. A callback's stop closes the generator.
            pieces = dec.stream(text, input_ids=ids, params=request)
            stats, reason = None, ""
            try:
                for piece in pieces:
                    stats, reason = piece.stats, piece.stop_reason
                    new, data = [int(t) for t in piece.token_ids], piece.text.encode("utf-8")
                    if on_piece(ffi.new("int32_t[]", new), len(new), ffi.new("char[]", data), len(data),
                                user_data) != 0:
                        reason = "callback"
                        break
            finally:
                pieces.close()
        self._fill_stats(out_stats, stats if stats is not None else Stats(), reason)

    def generate_sequences(self, ptr, prompt, input_ids, n_input, params, out_ids, out_capacity, out_len,
                           out_lengths, out_scores, max_sequences, out_count, out_stats) -> None:
        ffi, bad = self.ffi, self.lib.SPECDEC_E_INVALID_ARGUMENT
        session = self._session(ptr)
        self._out_buffer(out_ids, out_capacity, out_len, "out_ids")
        if out_count == ffi.NULL:
            raise Failure(bad, "out_count is NULL", "pass the address of a size_t to receive the number of sequences")
        if out_lengths == ffi.NULL and max_sequences:
            raise Failure(bad, f"out_lengths is NULL but max_sequences is {max_sequences}",
                          "pass arrays of max_sequences elements, or max_sequences 0 to measure only")
        with self._prompted(session, prompt, input_ids, n_input, params) as (dec, text, ids, request):
            res = dec.generate(text, input_ids=ids, params=request)
        sequences = [[int(t) for t in seq] for seq in res.sequences]
        scores = [float(x) for x in res.scores] if res.scores else [float("nan")] * len(sequences)
        total = sum(map(len, sequences))
        out_len[0], out_count[0] = total, len(sequences)
        self._fill_stats(out_stats, res.stats, res.stop_reason)
        if len(sequences) > max_sequences:
            raise Failure(self.lib.SPECDEC_E_BUFFER_TOO_SMALL, f"the output has {len(sequences)} sequences but "
                          f"max_sequences is {max_sequences}", f"call again with max_sequences >= {len(sequences)} "
                          "(same params give the same sequences)")
        if total > out_capacity:
            raise self._too_small(out_capacity, total, "ids")
        out_ids[0:total] = [t for seq in sequences for t in seq]
        out_lengths[0:len(sequences)] = [len(seq) for seq in sequences]
        if out_scores != ffi.NULL:
            out_scores[0:len(sequences)] = scores

    def decode(self, ptr, ids, n_ids, out_text, out_capacity, out_len) -> None:
        session = self._session(ptr)
        self._out_buffer(out_text, out_capacity, out_len, "out_text")
        if ids == self.ffi.NULL and n_ids:
            raise Failure(self.lib.SPECDEC_E_INVALID_ARGUMENT, f"ids is NULL but n_ids is {n_ids}",
                          "pass the token ids, or n_ids 0 for the empty text")
        tokens = self.ffi.unpack(ids, n_ids) if n_ids else []
        with self._hold(session) as dec:
            bad = [t for t in tokens if not 0 <= t < dec.vocab_size]
            if bad:
                raise Failure(self.lib.SPECDEC_E_INVALID_ARGUMENT, f"ids contains {bad[0]}, outside the vocabulary "
                              f"0..{dec.vocab_size - 1}", "pass ids from this session's export")
            data = dec.decode(tokens).encode("utf-8")
        self._give_text(data, out_text, out_capacity, out_len)


def classify(err: BaseException, lib) -> tuple[int, str]:
    """Status and message for an exception that is not a SpecdecError."""
    first = first_line(err, 300, "")
    described = f"{type(err).__name__}: {first}" if first else type(err).__name__
    if type(err).__module__.startswith("onnxruntime"):
        return lib.SPECDEC_E_RUNTIME, f"onnxruntime failed ({described})"
    return lib.SPECDEC_E_INTERNAL, f"internal error ({described}); please report it as a specdec bug"


def install(ffi, lib) -> CApi:
    """Attach the extern "Python" functions of libspecdec (called once by its init code)."""
    api = CApi(ffi, lib)
    api.install()
    return api
