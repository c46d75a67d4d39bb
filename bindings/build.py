"""Build libspecdec.so (the C API of include/specdec.h) with cffi's embedding mode, and the C and C++ examples.

    python -m specdec.bindings.build [--out build] [--no-examples] [--no-check] [--quiet]
    specdec-build-capi ...                                  (the same, as a console script)

Run it with the Python of the environment where specdec is installed (`pip install -e ".[capi]"`): the library
records that environment (its interpreter, which it starts CPython as, its sys.path, and the rpath of its
libpython), so a C host needs no
PYTHONPATH, PYTHONHOME or virtualenv activation; only the dynamic linker must find libspecdec.so (rpath or
LD_LIBRARY_PATH). Rebuild after moving or recreating that environment.

Output (default build/ at the project root, which git ignores):
    build/libspecdec.so               the library
    build/specdec-example-c           bindings/examples/example.c, linked with rpath $ORIGIN
    build/specdec-example-cpp         bindings/examples/example.cpp
The header is include/specdec.h (and include/specdec.hpp, the C++ RAII wrapper); both paths are printed.
Unless --no-check, the built example is run once with an empty environment (`env -i`) to prove that the embedded
interpreter starts and imports specdec.runtime.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from specdec.runtime.core.errors import OneLineParser, run_cli

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
INCLUDE = PROJECT / "include"
HEADER = INCLUDE / "specdec.h"
LIBRARY = "libspecdec.so"
MODULE = "libspecdec"           # the cffi module inside the library (PyInit_libspecdec)
EXAMPLES = {"specdec-example-c": "example.c", "specdec-example-cpp": "example.cpp"}

# Private declarations for cffi, next to the header's types: the extern "Python" functions of bindings/_capi.py
# (static: not exported; a model family's own are in its _capi_<family>.py, CDEF) and the C helpers the Python side
# calls.
PRIVATE_CDEF = """
#define SPECDEC_ERROR_MAX ...
#define SPECDEC_GAMMA_AUTO ...
extern "Python" int _specdec_py_open(const char *, const char *, specdec_session **);
extern "Python" int _specdec_py_close(specdec_session *);
extern "Python" int _specdec_py_get_info(specdec_session *, specdec_session_info *);
extern "Python" int _specdec_py_generate_ids(specdec_session *, const int32_t *, size_t, const specdec_params *,
                                             int32_t *, size_t, size_t *, specdec_stats *);
extern "Python" int _specdec_py_generate_text(specdec_session *, const char *, const specdec_params *, char *,
                                              size_t, size_t *, specdec_stats *);
extern "Python" int _specdec_py_stream(specdec_session *, const char *, const int32_t *, size_t,
                                       const specdec_params *, specdec_piece_callback, void *, specdec_stats *);
extern "Python" int _specdec_py_generate_sequences(specdec_session *, const char *, const int32_t *, size_t,
                                                   const specdec_params *, int32_t *, size_t, size_t *, size_t *,
                                                   double *, size_t, size_t *, specdec_stats *);
extern "Python" int _specdec_py_decode(specdec_session *, const int32_t *, size_t, char *, size_t, size_t *);
void _specdec_set_error(const char *message);
"""

# Runs inside the embedded interpreter on the first call that needs Python. %(build)s is the JSON of build_info().
INIT_CODE = r'''
import sys

BUILD = __import__("json").loads(%(build)r)


def _use_build_environment():
    """libspecdec starts CPython as the build environment's interpreter (so a virtualenv's site-packages and .pth
    files are in place already); entries the builder had on top (e.g. PYTHONPATH) are added here."""
    import site

    for d in BUILD["site_dirs"]:
        if d not in sys.path:
            site.addsitedir(d)
    sys.path.extend(p for p in BUILD["sys_path"] if p and p not in sys.path)


_use_build_environment()
from %(module)s import ffi, lib

try:
    from specdec.bindings import _capi
    _capi.install(ffi, lib)
except BaseException as err:
    # Every extern "Python" function must be attached: an unattached one would return 0, which is SPECDEC_OK.
    _message = ("the embedded Python cannot import specdec.bindings._capi (%%s: %%s); unset PYTHONPATH in the "
                "host's environment, or rebuild libspecdec with `python -m specdec.bindings.build` in the "
                "environment where specdec is installed (it was built for %%s)"
                %% (type(err).__name__, str(err).splitlines()[0] if str(err) else "", BUILD["python"]))

    def _unavailable(name):
        def fail(*args):
            text = ("%%s: %%s" %% (name, _message)).encode("utf-8", "replace")
            lib._specdec_set_error(text[:lib.SPECDEC_ERROR_MAX - 1])
            return lib.SPECDEC_E_PYTHON
        return fail

    for _name, _extern in %(externs)r.items():
        ffi.def_extern(name=_extern, error=lib.SPECDEC_E_PYTHON)(_unavailable(_name))
'''


def header_types(header: Path = HEADER) -> str:
    """The cffi-parseable block of the header (between its @cffi-types markers)."""
    text = header.read_text()
    begin, end = "/* @cffi-types-begin */", "/* @cffi-types-end */"
    if begin not in text or end not in text:
        raise SystemExit(f"error: {header} lacks the {begin} ... {end} markers")
    return text[text.index(begin) + len(begin):text.index(end)]


def build_info(python: str = sys.executable) -> dict:
    """What the embedded interpreter needs to find this environment: its sys.path and site directories, read
    from a fresh interpreter (not this process, whose sys.path[0] is the current directory)."""
    probe = ("import json, site, sys; dirs = site.getsitepackages() + "
             "([site.getusersitepackages()] if site.ENABLE_USER_SITE else []); "
             "print(json.dumps({'sys_path': sys.path[1:], 'site_dirs': [d for d in dirs if d in sys.path]}))")
    info = json.loads(subprocess.run([python, "-c", probe], check=True, capture_output=True, text=True).stdout)
    from specdec import __version__

    return {**info, "python": python, "version": __version__}


def libpython() -> tuple[str, str]:
    """(LIBDIR, full path of the shared libpython) of this interpreter; a static-only Python cannot embed."""
    libdir = sysconfig.get_config_var("LIBDIR")
    soname = sysconfig.get_config_var("INSTSONAME") or sysconfig.get_config_var("LDLIBRARY")
    if not sysconfig.get_config_var("Py_ENABLE_SHARED") or not libdir or not (Path(libdir) / soname).exists():
        raise SystemExit(f"error: {sys.executable} has no shared libpython (Py_ENABLE_SHARED=0); libspecdec needs "
                         "one; use a Python built with --enable-shared (distribution and pyenv builds with "
                         "PYTHON_CONFIGURE_OPTS=--enable-shared are)")
    return libdir, str(Path(libdir) / soname)


def build_library(out: Path, verbose: bool = False) -> Path:
    import cffi

    out = Path(out).resolve()
    tmp = out / "capi-tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    libdir, libpy = libpython()
    info = build_info()

    ffi = cffi.FFI()
    ffi.cdef(header_types() + PRIVATE_CDEF + "".join(_family_tables("CDEF")))
    ffi.embedding_api("")       # embedding mode; the public functions are C (bindings/capi.c), not cffi's
    ffi.embedding_init_code(INIT_CODE % {"build": json.dumps(info), "module": MODULE,
                                         "externs": _externs()})
    source = '#include "specdec.h"\n' + (HERE / "capi.c").read_text()
    c_string = lambda s: '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
    ffi.set_source(MODULE, source, include_dirs=[str(INCLUDE)], library_dirs=[libdir],
                   define_macros=[("SPECDEC_PACKAGE_VERSION", c_string(info["version"])),
                                  ("SPECDEC_LIBPYTHON", c_string(libpy)),
                                  ("SPECDEC_PYTHON_EXECUTABLE", c_string(info["python"]))],
                   extra_compile_args=["-fvisibility=hidden", "-O2"],
                   extra_link_args=[f"-Wl,-rpath,{libdir}", f"-Wl,-soname,{LIBRARY}", "-Wl,--no-undefined"])
    built = Path(ffi.compile(tmpdir=str(tmp), target=LIBRARY, verbose=verbose))
    target = out / LIBRARY
    staged = out / (LIBRARY + ".new")
    shutil.copy2(built, staged)
    os.replace(staged, target)          # atomic: a running host keeps the old file
    return target


def _table(path: Path, name: str):
    """The literal assigned to `name` at the top level of a module (None if none), read without importing it:
    specdec.runtime is not imported (the build needs only cffi and a compiler)."""
    import ast

    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == name:
            return ast.literal_eval(node.value)
    return None


def _family_tables(name: str) -> list:
    """`name` (EXTERNS or CDEF) of each model family's module of C calls (bindings/_capi_<family>.py), as _capi.py
    finds them."""
    found = []
    for path in sorted(HERE.glob("_capi_*.py")):
        table = _table(path, name)
        if table is None:
            raise SystemExit(f"error: bindings/{path.name} has no {name}")
        found.append(table)
    return found


def _externs() -> dict:
    externs = _table(HERE / "_capi.py", "EXTERNS")
    if externs is None:
        raise SystemExit("error: bindings/_capi.py has no EXTERNS table")
    for table in _family_tables("EXTERNS"):
        externs.update(table)
    return externs


def example_commands(out: Path) -> list[list[str]]:
    """The gcc/g++ command lines for the examples (also in bindings/README.md)."""
    out = Path(out).resolve()
    src = HERE / "examples"
    rpath = "-Wl,-rpath,$ORIGIN"    # the examples find libspecdec.so next to themselves
    return [["gcc", "-std=c99", "-Wall", "-Wextra", "-pedantic", "-O2", f"-I{INCLUDE}",
             str(src / EXAMPLES["specdec-example-c"]), "-o", str(out / "specdec-example-c"),
             f"-L{out}", "-lspecdec", rpath],
            ["g++", "-std=c++17", "-Wall", "-Wextra", "-pedantic", "-O2", f"-I{INCLUDE}",
             str(src / EXAMPLES["specdec-example-cpp"]), "-o", str(out / "specdec-example-cpp"),
             f"-L{out}", "-lspecdec", rpath]]


def run(cmd: list[str], quiet: bool) -> None:
    if not quiet:
        print("+ " + shlex.join(cmd), flush=True)
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"error: {shlex.join(cmd)} failed ({result.returncode}):\n{result.stdout}{result.stderr}")


def check(out: Path) -> str:
    """Run the C example with an empty environment on no export: Python must start and answer with an error
    status from specdec.runtime (so the embedded interpreter found this environment)."""
    exe = Path(out).resolve() / "specdec-example-c"
    result = subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", str(exe), "--check"], capture_output=True,
                            text=True, timeout=300, check=False)
    if result.returncode != 0:
        raise SystemExit(f"error: the self-check `env -i {exe} --check` failed ({result.returncode}):\n"
                         f"{result.stdout}{result.stderr}")
    return result.stdout.strip()


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="specdec-build-capi", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(PROJECT / "build"), help="output directory (default: <project>/build)")
    p.add_argument("--no-examples", action="store_true", help="build only libspecdec.so")
    p.add_argument("--no-check", action="store_true", help="skip the env -i self-check of the C example")
    p.add_argument("--quiet", action="store_true", help="print only the results")
    p.add_argument("--verbose", action="store_true", help="show the compiler output of the cffi build")
    return p


def main(argv=None) -> int:
    return run_cli(_main, argv)


def _main(argv) -> int:
    args = parser().parse_args(argv)
    if not HEADER.is_file():
        print(f'error: {HEADER} not found; build from a source checkout of specdec (pip install -e ".[capi]")',
              file=sys.stderr)
        return 2
    out = Path(args.out).resolve()
    library = build_library(out, verbose=args.verbose)
    print(f"library: {library}")
    print(f"include: {INCLUDE}")
    if not args.no_examples:
        for cmd in example_commands(out):
            run(cmd, args.quiet)
        for name in EXAMPLES:
            print(f"example: {out / name}")
        if not args.no_check:
            print(f"check:   {check(out)}")
    print(f"link your program with: -I{INCLUDE} -L{out} -lspecdec -Wl,-rpath,{out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
