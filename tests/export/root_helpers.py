"""The root conftest's helper functions under a module name no other test folder uses.

`from conftest import ...` is ambiguous once tests/runtime has a conftest.py of its own (pytest keeps one module
called `conftest` in sys.modules, the last one it imported), so the export tests import from here. The module name
is shared with tests/runtime/_shared.py, so the root conftest is executed once for both."""

import importlib.util
import sys
from pathlib import Path

_name = "specdec_tests_root_conftest"
if _name not in sys.modules:
    _spec = importlib.util.spec_from_file_location(_name, Path(__file__).parents[1] / "conftest.py")
    sys.modules[_name] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules[_name])
_root = sys.modules[_name]

fill_hub_cache = _root.fill_hub_cache
make_tiny_t5 = _root.make_tiny_t5
read_manifest = _root.read_manifest
run_export_cli = _root.run_export_cli
tiny_t5_config = _root.tiny_t5_config
tiny_t5_model = _root.tiny_t5_model
write_tiny_tokenizer = _root.write_tiny_tokenizer
