"""Audio in (runtime/loading/audio.py): WAV files read against references computed here, every refusal one
SpecdecError line, check_audio's array rules, and a seeded fuzz of mutated WAV files with a control that shows the
fuzz harness catches a reader that trusts the data chunk's size.

PCM files are written with the stdlib `wave` module (tag 1, any width); IEEE float and WAVE_FORMAT_EXTENSIBLE files,
and every malformed one, are written byte by byte with `struct` here. References are computed with NumPy in float64
from the integers or floats the test wrote, then rounded once to float32.
"""

from __future__ import annotations

import os
import random
import struct
import time
import wave
from pathlib import Path

import numpy as np
import pytest

from specdec.runtime.core.errors import SpecdecError
from specdec.runtime.loading import audio
from specdec.runtime.loading.audio import SAMPLE_RATE, check_audio, read_wav

PCM_GUID_TAIL = bytes.fromhex("000000001000800000aa00389b71")


# -- writing WAV files -------------------------------------------------------------------------------------------

def pcm_ints(frames: int, channels: int, bits: int, seed: int = 0) -> np.ndarray:
    """[frames, channels] integers of the sample's range (8-bit: unsigned 0..255), its extremes first."""
    rng = np.random.default_rng(seed)
    low, high = (0, 255) if bits == 8 else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    ints = rng.integers(low, high, size=(frames, channels), endpoint=True, dtype=np.int64)
    ints[0, :], ints[1, :] = low, high
    return ints


def pcm_bytes(ints: np.ndarray, bits: int) -> bytes:
    """Interleaved little-endian bytes of [frames, channels] integers (8-bit unsigned, others signed)."""
    flat = ints.reshape(-1)
    if bits == 8:
        return flat.astype(np.uint8).tobytes()
    if bits == 24:
        return np.asarray(flat, "<i4").view(np.uint8).reshape(-1, 4)[:, :3].tobytes()
    return np.asarray(flat, f"<i{bits // 8}").tobytes()


def pcm_reference(ints: np.ndarray, bits: int) -> np.ndarray:
    values = ints.astype(np.float64) - (128 if bits == 8 else 0)
    return (values.mean(axis=1) / 2.0 ** (bits - 1)).astype(np.float32)


def write_stdlib_wav(path: Path, ints: np.ndarray, bits: int, rate: int = SAMPLE_RATE) -> Path:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(ints.shape[1])
        out.setsampwidth(bits // 8)
        out.setframerate(rate)
        out.writeframes(pcm_bytes(ints, bits))
    return path


def chunk(cid: bytes, body: bytes, size: int | None = None, pad: bool = True) -> bytes:
    """A RIFF chunk: id, size (the body's unless given), body, and the pad byte after an odd-sized body."""
    size = len(body) if size is None else size
    return cid + struct.pack("<I", size) + body + (b"\0" if pad and len(body) % 2 else b"")


def riff(*chunks: bytes, size: int | None = None) -> bytes:
    body = b"WAVE" + b"".join(chunks)
    return b"RIFF" + struct.pack("<I", len(body) if size is None else size) + body


def fmt(tag: int, channels: int, bits: int, rate: int = SAMPLE_RATE, align: int | None = None,
        extra: bytes = b"") -> bytes:
    align = channels * bits // 8 if align is None else align
    return chunk(b"fmt ", struct.pack("<HHIIHH", tag, channels, rate, rate * align, align, bits) + extra)


def extensible_fmt(sub_tag: int, channels: int, bits: int, valid: int | None = None, rate: int = SAMPLE_RATE,
                   guid_tail: bytes = PCM_GUID_TAIL) -> bytes:
    sub = struct.pack("<H", sub_tag) + guid_tail
    extra = struct.pack("<HHI", 22, bits if valid is None else valid, (1 << channels) - 1) + sub
    return fmt(0xFFFE, channels, bits, rate, extra=extra)


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def stereo16(frames: int = 64, seed: int = 0) -> tuple[bytes, np.ndarray]:
    """A valid 16 kHz 16-bit stereo file with a LIST chunk (odd-sized, so padded) before data, and its reference."""
    ints = pcm_ints(frames, 2, 16, seed)
    info = chunk(b"LIST", b"INFOISFT" + struct.pack("<I", 5) + b"test\0")  # 17 bytes: padded
    return riff(fmt(1, 2, 16), info, chunk(b"data", pcm_bytes(ints, 16))), pcm_reference(ints, 16)


def refused(call, *words: str) -> str:
    """The SpecdecError `call()` raises: one line, naming each of `words`."""
    with pytest.raises(SpecdecError) as caught:
        call()
    text = str(caught.value)
    assert "\n" not in text and text.strip() == text, text
    for word in words:
        assert word in text, (word, text)
    return text


# -- reading: round trips ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("bits", [8, 16, 24, 32])
@pytest.mark.parametrize("channels", [1, 2])
def test_stdlib_pcm_round_trips_exactly(tmp_path, bits, channels):
    """The stdlib wave module's PCM files, 8/16/24/32-bit, mono and stereo: read_wav equals the float64 reference
    rounded once to float32, bit for bit (extremes included: -1.0 and 1 - 2^-(bits-1))."""
    ints = pcm_ints(1000, channels, bits, seed=bits + channels)
    got = read_wav(write_stdlib_wav(tmp_path / "a.wav", ints, bits))
    want = pcm_reference(ints, bits)
    assert got.dtype == np.float32 and got.shape == (1000,)
    np.testing.assert_array_equal(got, want)
    if channels == 1:
        assert got[0] == -1.0 and got[1] == np.float32(1 - 2.0 ** -(bits - 1))
    assert np.abs(got).max() <= 1.0


def test_many_channels_are_mixed_by_their_mean(tmp_path):
    """Six 24-bit channels (a mean that is not a power-of-two division): within 1 ulp of the float64 mean."""
    ints = pcm_ints(500, 6, 24, seed=9)
    got = read_wav(write_stdlib_wav(tmp_path / "six.wav", ints, 24))
    want = (ints.astype(np.float64).mean(axis=1) / 2.0 ** 23)
    np.testing.assert_array_max_ulp(got, want.astype(np.float32), maxulp=1)
    assert np.abs(got.astype(np.float64) - want).max() <= np.spacing(np.float32(1)) / 2


@pytest.mark.parametrize("bits", [32, 64])
@pytest.mark.parametrize("channels", [1, 2])
def test_ieee_float_round_trips(tmp_path, bits, channels):
    """Tag 3, float32 and float64, with a fact chunk: the float64 mean rounded to float32; values outside [-1, 1]
    are kept, not clipped; mono float32 comes back bit for bit."""
    rng = np.random.default_rng(bits)
    values = rng.normal(0, 0.5, size=(700, channels)).astype(f"<f{bits // 8}")
    values[0, 0], values[1, 0] = 1.5, -2.25
    data = riff(fmt(3, channels, bits, extra=struct.pack("<H", 0)), chunk(b"fact", struct.pack("<I", 700)),
                chunk(b"data", values.tobytes()))
    got = read_wav(write(tmp_path / "f.wav", data))
    want = values.astype(np.float64).mean(axis=1).astype(np.float32)
    assert got.dtype == np.float32 and got.ndim == 1
    np.testing.assert_array_max_ulp(got, want, maxulp=1)
    if channels == 1 and bits == 32:
        np.testing.assert_array_equal(got, values[:, 0])
    if channels == 1:
        assert got[0] == 1.5 and got[1] == -2.25


def test_extensible_pcm_and_float(tmp_path):
    """WAVE_FORMAT_EXTENSIBLE: 24-bit PCM in 3 channels, 24 valid bits left-aligned in 32-bit containers, and float32
    in 2 channels, each against its reference."""
    ints = pcm_ints(300, 3, 24, seed=3)
    got = read_wav(write(tmp_path / "e24.wav", riff(extensible_fmt(1, 3, 24), chunk(b"data", pcm_bytes(ints, 24)))))
    np.testing.assert_array_max_ulp(got, pcm_reference(ints, 24), maxulp=1)

    mono = pcm_ints(300, 1, 24, seed=4)
    shifted = mono << 8  # the 24 valid bits in the container's top bits
    data = riff(extensible_fmt(1, 1, 32, valid=24), chunk(b"data", pcm_bytes(shifted, 32)))
    np.testing.assert_array_equal(read_wav(write(tmp_path / "e32.wav", data)), pcm_reference(mono, 24))

    values = np.random.default_rng(5).uniform(-1, 1, size=(300, 2)).astype("<f4")
    data = riff(extensible_fmt(3, 2, 32), chunk(b"data", values.tobytes()))
    np.testing.assert_array_max_ulp(read_wav(write(tmp_path / "ef.wav", data)),
                                    values.astype(np.float64).mean(axis=1).astype(np.float32), maxulp=1)


def test_files_written_and_read_by_scipy(tmp_path):
    """A third party's writer and reader (scipy.io.wavfile, a test dependency only): float32 mono, float64 with three
    channels (fmt of 18 bytes, a fact chunk) and 8/16/32-bit PCM; read_wav equals the reference computed from what
    scipy reads back."""
    wavfile = pytest.importorskip("scipy.io.wavfile")
    rng = np.random.default_rng(11)
    arrays = {
        "f32": rng.uniform(-1, 1, 400).astype(np.float32),
        "f64x3": rng.uniform(-1, 1, (400, 3)),
        "u8x2": rng.integers(0, 256, (400, 2)).astype(np.uint8),
        "i16": rng.integers(-32768, 32768, 400).astype(np.int16),
        "i32x2": rng.integers(-(1 << 31), 1 << 31, (400, 2)).astype(np.int32),
    }
    for name, array in arrays.items():
        path = tmp_path / f"{name}.wav"
        wavfile.write(path, SAMPLE_RATE, array)
        rate, back = wavfile.read(path)
        assert rate == SAMPLE_RATE and back.dtype == array.dtype
        values = back.astype(np.float64).reshape(len(back), -1)
        if back.dtype.kind == "u":
            values = (values - 128) / 128
        elif back.dtype.kind == "i":
            values = values / 2.0 ** (8 * back.dtype.itemsize - 1)
        want = values.mean(axis=1).astype(np.float32)
        np.testing.assert_array_equal(read_wav(path), want, err_msg=name)


def test_unknown_chunks_and_pad_bytes_are_skipped(tmp_path):
    """A LIST chunk and odd-sized chunks (with their pad bytes) before data, a chunk after it, fmt after data, and a
    last odd-sized chunk whose pad byte is missing: all read as the plain file."""
    ints = pcm_ints(200, 1, 16, seed=7)
    want = pcm_reference(ints, 16)
    body = chunk(b"data", pcm_bytes(ints, 16))
    info = chunk(b"LIST", b"INFOINAM" + struct.pack("<I", 3) + b"ab\0")
    odd = chunk(b"abc ", b"xyz")  # 3 bytes + pad
    assert len(odd) == 12 and odd.endswith(b"\0")
    cases = {
        "list": riff(fmt(1, 1, 16), info, body),
        "odd": riff(fmt(1, 1, 16), odd, info, body, chunk(b"JUNK", b"")),
        "fmt_after_data": riff(body, odd, fmt(1, 1, 16)),
        "no_last_pad": riff(fmt(1, 1, 16), body, chunk(b"tail", b"q", pad=False)),
        "trailing_bytes_after_riff": riff(fmt(1, 1, 16), body) + b"ID3\x04junk",
    }
    for name, data in cases.items():
        np.testing.assert_array_equal(read_wav(write(tmp_path / f"{name}.wav", data)), want, err_msg=name)
    # the pad byte matters: the same file without it puts the data chunk's header one byte off
    unpadded = riff(fmt(1, 1, 16), chunk(b"abc ", b"xyz", pad=False), body)
    refused(lambda: read_wav(write(tmp_path / "unpadded.wav", unpadded)), "WAV file")


def test_paths_of_each_kind_are_read(tmp_path):
    data, want = stereo16()
    path = write(tmp_path / "s.wav", data)
    for form in (path, str(path)):
        np.testing.assert_array_equal(read_wav(form), want)
        np.testing.assert_array_equal(check_audio(form), want)


# -- reading: refusals -------------------------------------------------------------------------------------------

def test_wrong_rate_names_the_rate_and_the_fix(tmp_path):
    ints = pcm_ints(100, 2, 16)
    text = refused(lambda: read_wav(write_stdlib_wav(tmp_path / "cd.wav", ints, 16, rate=44100)),
                   "44100 Hz", "16000", "ffmpeg -i in.wav -ar 16000 -ac 1 out.wav")
    assert "cd.wav" in text


def test_malformed_files_are_refused(tmp_path):
    """Each malformed file: one SpecdecError line naming the problem (the word asserted) and a fix."""
    ints = pcm_ints(50, 2, 16)
    good = pcm_bytes(ints, 16)
    data16 = chunk(b"data", good)
    valid = riff(fmt(1, 2, 16), data16)
    cases = {
        "empty": (b"", "too short"),
        "not_riff": (b"OggS" + bytes(60), "not a RIFF/WAVE"),
        "not_wave": (b"RIFF" + struct.pack("<I", 4) + b"AVI ", "not a RIFF/WAVE"),
        "rifx": (b"RIFX" + valid[4:], "RIFX"),
        "rf64": (b"RF64" + valid[4:], "RF64"),
        "header_only": (valid[:10], "too short"),
        "truncated_in_data": (valid[:len(valid) - 7], "truncated"),
        "truncated_in_fmt": (valid[:30], "truncated"),
        "riff_size_too_small": (riff(fmt(1, 2, 16), data16, size=2), "truncated"),
        "data_past_end": (riff(fmt(1, 2, 16), chunk(b"data", good, size=len(good) + 400)), "past the end"),
        "huge_data_size": (riff(fmt(1, 2, 16), chunk(b"data", good, size=0xFFFFFFFF)), "past the end"),
        "huge_list_size": (riff(fmt(1, 2, 16), chunk(b"LIST", b"INFO", size=0x7FFFFFF0), data16), "past the end"),
        "stray_bytes": (riff(fmt(1, 2, 16), data16, b"abc"), "stray bytes"),
        "no_fmt": (riff(data16), "no \"fmt \" chunk"),
        "no_data": (riff(fmt(1, 2, 16)), "no \"data\" chunk"),
        "two_data": (riff(fmt(1, 2, 16), data16, data16), "more than one \"data\""),
        "short_fmt": (riff(chunk(b"fmt ", bytes(14)), data16), "shorter than 16"),
        "mu_law": (riff(fmt(7, 1, 8), chunk(b"data", bytes(100))), "not PCM"),
        "a_law": (riff(fmt(6, 1, 8), chunk(b"data", bytes(100))), "not PCM"),
        "adpcm": (riff(fmt(2, 1, 4, align=256), chunk(b"data", bytes(256))), "not PCM"),
        "ima_adpcm": (riff(fmt(0x11, 1, 4, align=256), chunk(b"data", bytes(256))), "IMA ADPCM"),
        "extensible_adpcm": (riff(extensible_fmt(2, 1, 16), chunk(b"data", bytes(100))), "not PCM"),
        "extensible_bad_guid": (riff(extensible_fmt(1, 1, 16, guid_tail=bytes(14)), chunk(b"data", bytes(100))),
                                "GUID"),
        "extensible_short": (riff(fmt(0xFFFE, 1, 16, extra=struct.pack("<H", 0)), chunk(b"data", bytes(100))),
                             "shorter than 40"),
        "extensible_valid_over_bits": (riff(extensible_fmt(1, 1, 16, valid=20), chunk(b"data", bytes(100))),
                                       "20 valid bits"),
        "zero_channels": (riff(fmt(1, 0, 16, align=2), data16), "0 channels"),
        "too_many_channels": (riff(fmt(1, 65, 16), chunk(b"data", bytes(130))), "65 channels"),
        "pcm_12_bit": (riff(fmt(1, 1, 12, align=2), chunk(b"data", bytes(100))), "12-bit PCM"),
        "pcm_0_bit": (riff(fmt(1, 1, 0, align=1), chunk(b"data", bytes(100))), "0-bit PCM"),
        "float_16_bit": (riff(fmt(3, 1, 16), chunk(b"data", bytes(100))), "16-bit IEEE float"),
        "bad_align": (riff(fmt(1, 2, 16, align=3), data16), "block align"),
        "data_not_multiple": (riff(fmt(1, 2, 16), chunk(b"data", good[:-2])), "not a multiple"),
        "empty_data": (riff(fmt(1, 2, 16), chunk(b"data", b"")), "no samples"),
        "float_nan": (riff(fmt(3, 1, 32), chunk(b"data", np.array([0, np.nan, 1], "<f4").tobytes())), "NaN"),
        "float_inf": (riff(fmt(3, 1, 32), chunk(b"data", np.array([np.inf, 0], "<f4").tobytes())), "infinite"),
        "float64_beyond_float32": (riff(fmt(3, 1, 64), chunk(b"data", np.array([1e300, 0], "<f8").tobytes())),
                                   "beyond float32"),
    }
    for name, (data, word) in cases.items():
        path = write(tmp_path / f"{name}.wav", data)
        text = refused(lambda: read_wav(path), word)
        assert f"{name}.wav" in text and "; " in text, (name, text)


def test_paths_that_cannot_be_read_are_refused(tmp_path, monkeypatch):
    refused(lambda: read_wav(tmp_path / "missing.wav"), "does not exist", "missing.wav")
    refused(lambda: read_wav(tmp_path), "is a directory")
    refused(lambda: read_wav(str(tmp_path / "a\0b.wav")), "cannot be read")
    refused(lambda: read_wav(12), "int", "not a str")
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo")
        refused(lambda: read_wav(tmp_path / "fifo"), "not a regular file")
    if os.name == "posix" and os.geteuid() != 0:
        locked = write(tmp_path / "locked.wav", stereo16()[0])
        locked.chmod(0)
        refused(lambda: read_wav(locked), "cannot be read", "Permission denied")
    # the size limit is checked before reading (2 GiB here; a small one stands in for it)
    path = write(tmp_path / "big.wav", stereo16()[0])
    monkeypatch.setattr(audio, "MAX_WAV_BYTES", 100)
    refused(lambda: read_wav(path), "limit", "bytes")
    monkeypatch.setattr(audio, "MAX_WAV_BYTES", 2 << 30)
    monkeypatch.setattr(audio, "MAX_CHUNKS", 3)
    many = riff(fmt(1, 1, 16), *[chunk(b"JUNK", b"")] * 3, chunk(b"data", bytes(4)))
    refused(lambda: read_wav(write(tmp_path / "many.wav", many)), "more than 3 chunks")


def test_large_file_is_converted_a_block_at_a_time(tmp_path, monkeypatch):
    """Blocks of samples (small here, and not a multiple of the channels) give the same samples as one pass."""
    data, want = stereo16(frames=1001, seed=2)
    path = write(tmp_path / "s.wav", data)
    for block in (129, 2, 1):
        monkeypatch.setattr(audio, "BLOCK_SAMPLES", block)
        np.testing.assert_array_equal(read_wav(path), want)


# -- check_audio -------------------------------------------------------------------------------------------------

def test_check_audio_accepts_float32_mono_and_copies_it():
    rng = np.random.default_rng(1)
    base = rng.uniform(-1, 1, size=(3, 400)).astype(np.float32)
    cases = [base[0], base[1:2], base[:, ::2][0], base[2][::-1]]  # 1-D, [1, N], strided, reversed
    readonly = base[0].copy()
    readonly.flags.writeable = False
    cases.append(readonly)
    for array in cases:
        before = array.copy()
        got = check_audio(array)
        assert got.dtype == np.float32 and got.ndim == 1 and got.flags.c_contiguous and got.flags.writeable
        np.testing.assert_array_equal(got, before.reshape(-1))
        assert not np.shares_memory(got, array)
        got[:] = 7.0
        np.testing.assert_array_equal(array, before)


@pytest.mark.parametrize("value, words", [
    (np.zeros(10, np.int16), ["dtype int16", "np.asarray(x, np.float32)", "32768"]),
    (np.zeros(10, np.float64), ["dtype float64", "np.asarray(x, np.float32)"]),
    (np.zeros(10, np.dtype(">f4")), ["dtype >f4"]),
    (np.zeros(10, object), ["dtype object"]),
    (np.zeros((2, 10), np.float32), ["shape [2, 10]", "mono"]),
    (np.zeros((10, 1), np.float32), ["shape [10, 1]"]),
    (np.zeros((1, 1, 10), np.float32), ["shape [1, 1, 10]"]),
    (np.array(0.5, np.float32), ["shape []"]),
    (np.zeros(0, np.float32), ["no samples"]),
    (np.zeros((1, 0), np.float32), ["no samples"]),
    (np.array([0, np.nan, 1, np.nan], np.float32), ["2 NaN and 0 infinite", "index 1"]),
    (np.array([[np.inf, 0, -np.inf, np.inf]], np.float32), ["0 NaN and 3 infinite", "index 0"]),
    ([0.0, 0.1], ["is a list"]),
    (None, ["is a NoneType"]),
    (b"RIFF....WAVE", ["is a bytes"]),
    (np.float32(0.5), ["is a float32"]),
])
def test_check_audio_refusals(value, words):
    before = value.copy() if isinstance(value, np.ndarray) else None
    refused(lambda: check_audio(value), "audio=", *words)
    if before is not None:
        np.testing.assert_array_equal(value, before)


# -- fuzz --------------------------------------------------------------------------------------------------------

FUZZ_SEED = 20240611
FUZZ_CASES = 2000


def size_offsets(data: bytes) -> list[int]:
    """Offsets of the RIFF size field and of every chunk's size field in a valid file."""
    offsets, pos = [4], 12
    while pos + 8 <= len(data):
        offsets.append(pos + 4)
        size = struct.unpack_from("<I", data, pos + 4)[0]
        pos += 8 + size + (size & 1)
    return offsets


def mutate(data: bytes, rng: random.Random, header: int) -> tuple[str, bytes]:
    """One random mutation (or two, chained): positions fall inside the first `header` bytes half the time."""
    buf = bytearray(data)
    kind = rng.choice(["flip", "overwrite", "truncate", "size", "insert", "twice"])

    def position():
        return rng.randrange(min(header, len(buf))) if rng.random() < 0.5 else rng.randrange(len(buf))

    if kind == "flip":
        for _ in range(rng.randint(1, 8)):
            buf[position()] ^= 1 << rng.randrange(8)
    elif kind == "overwrite":
        for _ in range(rng.randint(1, 4)):
            buf[position()] = rng.choice([0x00, 0xFF, rng.randrange(256)])
    elif kind == "truncate":
        del buf[rng.randrange(len(buf)):]
    elif kind == "size":
        offsets = [offset for offset in size_offsets(data) if offset + 4 <= len(buf)] or [0]
        offset = rng.choice(offsets)
        old = struct.unpack_from("<I", buf, offset)[0] if offset + 4 <= len(buf) else 0
        new = rng.choice([0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, len(buf) * 3, 0, 1, old + 1, old - 1, old | 1,
                          rng.randrange(1 << 32)])
        buf[offset:offset + 4] = struct.pack("<I", new % (1 << 32))
    elif kind == "insert":
        at = position()
        buf[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    else:
        for _ in range(2):
            buf = bytearray(mutate(bytes(buf), rng, header)[1]) if buf else buf
    return kind, bytes(buf)


def fuzz_cases(seed: int = FUZZ_SEED, count: int = FUZZ_CASES) -> list[tuple[str, bytes]]:
    data, _ = stereo16(frames=120, seed=seed)
    header = len(data) - 120 * 4 + 16  # everything before the samples, and a few samples
    rng = random.Random(seed)
    return [mutate(data, rng, header) for _ in range(count)]


def run_fuzz(reader, cases, path: Path) -> tuple[list[str], int, int]:
    """(failures, accepted, refused): a failure is any outcome other than a one-line SpecdecError or a finite 1-D
    float32 array."""
    failures, accepted, refusals = [], 0, 0
    for index, (kind, data) in enumerate(cases):
        path.write_bytes(data)
        try:
            out = reader(path)
        except SpecdecError as err:
            refusals += 1
            if "\n" in str(err) or not str(err):
                failures.append(f"seed {FUZZ_SEED} case {index} ({kind}): message not one line: {err!r}")
            continue
        except Exception as err:  # noqa: BLE001 -- exactly what the harness looks for
            failures.append(f"seed {FUZZ_SEED} case {index} ({kind}): {type(err).__name__}: {err}")
            continue
        accepted += 1
        if not (isinstance(out, np.ndarray) and out.dtype == np.float32 and out.ndim == 1
                and np.isfinite(out).all()):
            failures.append(f"seed {FUZZ_SEED} case {index} ({kind}): returned {type(out).__name__} "
                            f"{getattr(out, 'dtype', '')} {getattr(out, 'shape', '')}")
    return failures, accepted, refusals


def test_fuzzed_wav_files_are_read_or_refused_in_one_line(tmp_path):
    """Sample: FUZZ_CASES = 2000 mutations (seed FUZZ_SEED) of a valid 16 kHz 16-bit stereo WAV with a padded LIST
    chunk: bit flips, byte overwrites with 0x00/0xFF/random bytes, truncations at random lengths, size fields (RIFF
    and every chunk's) set to huge, zero, odd or random values, random insertions, and two of these chained; half the
    positions fall in the header. Each is read from disk: it must give a finite 1-D float32 array or a one-line
    SpecdecError; anything else fails, naming the seed and the case's index. Both outcomes occur."""
    started = time.monotonic()
    cases = fuzz_cases()
    assert len(cases) == FUZZ_CASES and len({data for _, data in cases}) > FUZZ_CASES * 0.75
    failures, accepted, refusals = run_fuzz(read_wav, cases, tmp_path / "fuzz.wav")
    assert failures == [], failures[:10]
    assert accepted + refusals == FUZZ_CASES
    assert accepted > 100 and refusals > 500, (accepted, refusals)
    assert time.monotonic() - started < 20


def test_the_fuzz_harness_catches_a_reader_that_trusts_the_data_size(tmp_path):
    """Control: a reader that checks the magic and the format as read_wav does but trusts the chunk sizes (it slices
    the data chunk by its size field and reads the fmt fields without a bounds check) raises other exceptions on some
    of the same mutated files, so the harness above would catch such a reader."""

    def naive(path):
        data = Path(path).read_bytes()
        if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
            raise SpecdecError("not a RIFF/WAVE file")
        pos, found = 12, {}
        while pos < len(data) and b"data" not in found:
            cid, size = struct.unpack_from("<4sI", data, pos)
            found[cid] = (pos + 8, size)
            pos += 8 + size + (size & 1)
        if b"fmt " not in found or b"data" not in found:
            raise SpecdecError("no fmt or data chunk")
        tag, channels, rate, _, align, bits = struct.unpack_from("<HHIIHH", data, found[b"fmt "][0])
        if (tag, bits, rate) != (1, 16, SAMPLE_RATE) or channels == 0:
            raise SpecdecError("not 16 kHz 16-bit PCM")
        body, size = found[b"data"]
        samples = np.frombuffer(data, "<i2", size // 2, body)
        return (samples.reshape(-1, channels).mean(axis=1) / 32768).astype(np.float32)

    failures, _, _ = run_fuzz(naive, fuzz_cases(), tmp_path / "fuzz.wav")
    assert failures, "the naive reader passed every case: the fuzz cases do not reach the size checks"
    assert any(": ValueError:" in f for f in failures), failures[:5]
