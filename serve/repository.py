"""A Triton model repository for a stand-alone Triton Inference Server (Python backend): the same two models as
`specdec-serve` (specdec and specdec_stream, the same inputs and outputs from schema.py: those of the export's model
family), each a config.pbtxt and a model.py that loads the export with the runtime. The server's
Python needs specdec installed (`pip install -e .` in a checkout; PyTriton is not needed there).

    DIR/specdec/config.pbtxt           DIR/specdec/1/model.py
    DIR/specdec_stream/config.pbtxt    DIR/specdec_stream/1/model.py     (decoupled)

The export is not copied: config.pbtxt names it by absolute path (parameter "engine"), so it must be at that path
on the server (copy or mount it there, or edit the parameter)."""

from __future__ import annotations

from pathlib import Path

from specdec.runtime.core.errors import SpecdecError
from specdec.runtime.core.options import LoadOptions

from . import schema

MODEL_PY = '''"""specdec on Triton's Python backend (written by specdec-serve --write-model-repository). Parameters in
config.pbtxt: engine (the export directory), each load option specdec-serve takes under its own name (provider,
threads: intra-op threads per instance, graph_capture: "true" loads the export's capturable graphs and requests then
run alone, ...), max_batch and max_queue (the instance's batcher). Each instance is a process with its own decoder;
the requests of one instance share its batch."""

import faulthandler
import gc
import json
import threading

import triton_python_backend_utils as pb_utils

from specdec.runtime.core.errors import SpecdecError
from specdec.serve import schema

try:        # a stub killed by a fatal signal (SIGSEGV...) writes its threads' Python stacks to the server's log
    faulthandler.enable()
except (RuntimeError, ValueError, OSError):         # no usable stderr
    pass


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        decoder = schema.load_decoder(params["engine"], schema.config_options(params))
        self.handler = schema.Handler(decoder, int(params.get("max_batch", schema.MAX_BATCH)),
                                      int(params.get("max_queue", schema.MAX_QUEUE)))
        self.streams, self.lock = set(), threading.Lock()       # the threads of the streams in flight

    def execute(self, requests):
        if not self.decoupled:               # one dynamic batch: every request's rows join the decoder's batch
            answers = schema.batch_answers(self.handler, [_getter(request) for request in requests])
            return [pb_utils.InferenceResponse(error=pb_utils.TritonError(str(error))) if error is not None
                    else pb_utils.InferenceResponse(output_tensors=_tensors(outputs)) for outputs, error in answers]
        for request in requests:             # a stream each: they join the batch while others run
            thread = threading.Thread(target=self._stream, args=(request,), daemon=True)
            with self.lock:
                self.streams.add(thread)
            thread.start()
        return None

    def finalize(self):
        # Requests, their senders and tensors live in the stub's shared memory, which the stub unmaps after
        # finalize() and before its interpreter ends. One of them freed after that (a stream's thread still ending,
        # or a garbage cycle: a failed request's error keeps, through its traceback, the frames that hold the
        # requests, and only the interpreter's last collection would free it) locks a mutex in the unmapped memory
        # and the stub dies of SIGSEGV as it exits. So here, while the memory is there: wait for the streams'
        # threads, stop the batcher, drop the decoder (its onnxruntime sessions and their threads end now, not at
        # the interpreter's exit) and free every cycle.
        with self.lock:
            streams = list(self.streams)
        for thread in streams:
            thread.join(timeout=30)
        self.handler.close()
        self.handler = None
        gc.collect()

    def _stream(self, request):
        try:
            self._send_pieces(request)
        finally:
            with self.lock:
                self.streams.discard(threading.current_thread())

    def _send_pieces(self, request):
        sender = request.get_response_sender()
        pieces = self.handler.stream(_getter(request))
        try:
            for sent, out in enumerate(pieces):
                # the client went away: its row is freed at the next round. The request still needs its final
                # flag: Triton releases it (and can unload the model, so that a stop ends cleanly) only after it
                if request.is_cancelled():
                    pieces.close()
                    pb_utils.Logger.log_info(f"specdec_stream: a request cancelled by its client after {sent} "
                                             "pieces; its row is freed")
                    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                    return
                sender.send(pb_utils.InferenceResponse(output_tensors=_tensors(out)))
        except Exception as err:
            text = str(err) if isinstance(err, SpecdecError) else f"{type(err).__name__}: {err}"
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(text)),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


def _getter(request):
    def get(name):
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        return None if tensor is None else tensor.as_numpy()
    return get


def _tensors(out):
    return [pb_utils.Tensor(name, value) for name, value in out.items()]
'''


def _io(kind: str, fields) -> str:
    rows = []
    for f in fields:
        dims = ", ".join(str(d) for d in f.shape)
        optional = "\n    optional: true" if f.optional else ""
        rows.append(f'  {{\n    name: "{f.name}"\n    data_type: {f.triton_type}\n    dims: [ {dims} ]{optional}\n  }}')
    return f"{kind} [\n" + ",\n".join(rows) + "\n]\n"


def config_pbtxt(name: str, engine: Path, instances: int, decoupled: bool, max_batch: int = schema.MAX_BATCH,
                 max_queue: int = schema.MAX_QUEUE, queue_delay_us: int = 500,
                 serving: schema.Serving = schema.TEXT, options: LoadOptions | None = None) -> str:
    """The config.pbtxt (protobuf text format, Triton's ModelConfig) of one of the two models: MODEL with Triton's
    dynamic batching (max_batch_size, the queue delay and a bounded queue), the decoupled one without. serving: the
    export's family's serving description (its inputs and outputs; schema.serving_of). options: the decoder's load
    options, a parameter each as text (graph_capture "true" or "false"), which model.py reads back
    (schema.config_options)."""
    text = (f'name: "{name}"\nbackend: "python"\nmax_batch_size: {0 if decoupled else max_batch}\n'
            + _io("input", serving.inputs) + _io("output", serving.outputs)
            + f"instance_group [\n  {{\n    count: {instances}\n    kind: KIND_CPU\n  }}\n]\n")
    if decoupled:
        text += "model_transaction_policy {\n  decoupled: true\n}\n"
    else:
        text += (f"dynamic_batching {{\n  max_queue_delay_microseconds: {queue_delay_us}\n"
                 f"  default_queue_policy {{\n    max_queue_size: {max_queue}\n  }}\n}}\n")
    loading = (options or LoadOptions()).as_text("serve")
    for key, value in (("engine", str(engine)), *loading.items(), ("max_batch", str(max_batch)),
                       ("max_queue", str(max_queue))):
        quoted = value.replace("\\", "\\\\").replace('"', '\\"')
        text += f'parameters {{\n  key: "{key}"\n  value: {{ string_value: "{quoted}" }}\n}}\n'
    return text


def write_model_repository(out, engine, *, instances: int = 1, max_batch: int = schema.MAX_BATCH,
                           max_queue: int = schema.MAX_QUEUE, queue_delay_us: int = 500,
                           options: LoadOptions | None = None, **load) -> Path:
    """Write the repository to `out` (created; existing model files there are replaced) for the export `engine`,
    which is checked first (with graph_capture: that it has the capturable graphs), its decoder loaded with
    `options` and/or keywords (the load options serve takes: provider, threads, graph_capture). Returns `out`."""
    options = schema.load_options(options, **load)
    from specdec.runtime import family_inputs, load_manifest

    engine = Path(engine).resolve()
    manifest = load_manifest(engine)                     # a one-line SpecdecError if it is not a (complete) export
    serving = schema.serving_of(family_inputs(manifest))
    if options.graph_capture and manifest.graph_capture is None:     # as the decoder would say when Triton loads it
        raise SpecdecError(f"export '{engine}' has no capturable graphs",
                           "re-export it with specdec-export ... --graph-capture, or leave out --graph-capture")
    if not isinstance(instances, int) or instances < 1:
        raise SpecdecError(f"instances must be a positive integer (got {instances!r})")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise SpecdecError(f"{out} exists and is not a directory", "pass a new or existing directory")
    for name, decoupled in ((schema.MODEL, False), (schema.STREAM_MODEL, True)):
        (out / name / "1").mkdir(parents=True, exist_ok=True)
        (out / name / "config.pbtxt").write_text(config_pbtxt(name, engine, instances, decoupled, max_batch,
                                                              max_queue, queue_delay_us, serving, options))
        (out / name / "1" / "model.py").write_text(MODEL_PY)
    return out
