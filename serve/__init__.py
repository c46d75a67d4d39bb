"""specdec.serve: specdec on a real Triton Inference Server, started from Python through PyTriton.

Needs the serve extra (`pip install -e ".[serve]"`); the runtime (specdec.runtime) never imports this package.

The model families served besides text: importing each one's module adds its serving description to
schema.SERVINGS, so every module of this package finds it there."""

from . import speech  # noqa: F401
