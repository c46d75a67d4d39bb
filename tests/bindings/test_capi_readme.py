"""The README's C program, as written there: it compiles against include/specdec.h and libspecdec (the flags
specdec-build-capi prints), runs with an empty environment on an export of the bundled pair named `exported` in
its directory, and prints what the Python API gives for the same prompt and default params; on a directory that is
not an export it prints the one-line error and exits 1."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from _capi_helpers import run_program

README = Path(__file__).resolve().parents[2] / "README.md"
PROMPT = "translate English to German: This package contains the development library libFLAC."


def readme_program() -> str:
    blocks = re.findall(r"```c\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) == 1, "the README should hold exactly one C block"
    return blocks[0]


def test_the_readme_c_program_compiles_runs_and_checks_its_status(compile_c, tmp_path, request):
    source = tmp_path / "readme.c"
    source.write_text(readme_program())
    exe = compile_c(source, "readme-example")
    assert PROMPT in source.read_text()

    missing = run_program([exe], cwd=tmp_path, check=False)          # no export there yet
    assert missing.returncode == 1 and missing.stdout == "", missing
    assert missing.stderr.count("\n") == 1 and "specdec_open" in missing.stderr, missing.stderr

    # the bundled pair exported with `specdec-export --export exported --max-length 256` (made once per run and copied
    # here: tests/conftest.py's bundled_export, which skips where models/ holds no trained pair)
    shutil.copytree(request.getfixturevalue("bundled_export"), tmp_path / "exported")
    ran = run_program([exe], cwd=tmp_path)
    from specdec.runtime import SpeculativeDecoder

    want = SpeculativeDecoder.load(tmp_path / "exported", provider="cpu").generate(PROMPT).text
    assert ran.stdout == want + "\n" and want, (ran.stdout, want)
