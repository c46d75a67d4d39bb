"""The root conftest's helper functions, importable from this folder (both folders have a module named conftest)."""

import importlib.util
import sys
from pathlib import Path

_name = "specdec_tests_root_conftest"
if _name not in sys.modules:
    _spec = importlib.util.spec_from_file_location(_name, Path(__file__).parents[1] / "conftest.py")
    sys.modules[_name] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules[_name])
_root = sys.modules[_name]

make_tiny_t5 = _root.make_tiny_t5
run_export_cli = _root.run_export_cli
