"""specdec.serve: specdec on a real Triton Inference Server, started from Python through PyTriton.

Needs the serve extra (`pip install -e ".[serve]"`); the runtime (specdec.runtime) never imports this package."""
