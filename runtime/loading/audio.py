"""The speech family's loading side: the manifest's "speech" entry, and audio in, checked.

The "speech" entry (SPEECH, written by export/families/whisper.py) is declared here and checked by `check_entry`
(schema.FAMILY_ENTRIES names this module): the audio the encoder graph takes, the decoder prompt's tokens, the tokens
generation suppresses and the drafts that keep the target's encoder. An export has the entry if and only if its
models are Whisper ones.

Audio in: a WAV file or a float32 array becomes 16 kHz mono float32 samples, or one SpecdecError line. Whisper's
encoder graph takes 16 kHz mono PCM in [-1, 1] scale (it computes the log-mel features itself), so the audio a
caller passes as `audio=` is checked here, with NumPy and the standard library only:

  - `check_audio(audio)`: a path (str or os.PathLike) is read by `read_wav`; anything else must be a NumPy array of
    dtype float32 (another dtype is refused, not converted: int16 PCM is on another scale) of shape [samples] or
    [1, samples], non-empty, every sample finite. The result is a new C-contiguous 1-D float32 array; the caller's
    array is never modified. A list, None, bytes or any other value is refused.
  - `read_wav(path)`: a RIFF/WAVE file, parsed by hand (the stdlib `wave` module refuses IEEE float). Accepted: format
    tag 1 (PCM: 8-bit unsigned, 16-, 24- and 32-bit signed little-endian), 3 (IEEE float, 32 or 64 bit) and 0xFFFE
    (WAVE_FORMAT_EXTENSIBLE whose sub-format GUID is PCM or IEEE float, samples in containers of those sizes: the
    valid-bits field may be smaller, the samples are left-aligned); 1 to MAX_CHANNELS channels, mixed to mono by
    their mean; the sample rate exactly SAMPLE_RATE. PCM becomes x / 2^(bits - 1) (8-bit: (x - 128) / 128),
    computed in float64 and rounded once to float32; float samples are kept as they are (not clipped to [-1, 1]).
    The chunks may come in any order; chunks other than `fmt ` and `data` (LIST, fact, JUNK, ...) are skipped,
    with the pad byte after an odd-sized one (a missing pad byte after the last chunk is tolerated). Bytes after the
    RIFF chunk (as its size field gives it) are ignored; the byte-rate field is not used.

Refused, each with a one-line SpecdecError naming the file, the problem and the fix, never another exception: a
missing, unreadable or non-regular path, a file over MAX_WAV_BYTES (checked before it is read; it is then read once,
at most that many bytes); not RIFF/WAVE (RIFX, RF64 included); a truncated header, a chunk header or chunk whose
size points past the RIFF chunk's end, more than MAX_CHUNKS chunks; no `fmt ` or no `data` chunk, or two of either;
a fmt chunk too short for its format; a compressed or other format tag (ADPCM, A-law, mu-law, MP3, ...: "not PCM");
0 or more than MAX_CHANNELS channels, bits per sample other than those above, a block align other than channels x
bytes per sample; a data size that is not a multiple of the block align, or no samples at all; a float file with
NaN or infinite samples, or whose mix to float32 is not finite; a sample rate other than 16000 (the error says the
rate found and how to resample). Every size field is checked against the bytes actually read before it is used, so
no allocation is larger than a small multiple of the file.
"""

from __future__ import annotations

import os
import stat
import struct

import numpy as np

from ..core.errors import SpecdecError
from . import keys
from .confine import shown
from .keys import Key

SAMPLE_RATE = 16_000
MAX_WAV_BYTES = 2 << 30     # 2 GiB: about 18 hours of 16 kHz mono 16-bit audio
MAX_CHANNELS = 64
MAX_CHUNKS = 4096
BLOCK_SAMPLES = 1 << 20     # samples (frames x channels) converted at a time, bounding the temporaries

PCM, IEEE_FLOAT, EXTENSIBLE = 0x0001, 0x0003, 0xFFFE
PCM_BITS = (8, 16, 24, 32)
FLOAT_BITS = (32, 64)
# bytes 2..15 of the KSDATAFORMAT_SUBTYPE_* GUIDs; bytes 0..1 are the format tag (little-endian)
GUID_TAIL = bytes.fromhex("000000001000800000aa00389b71")
KNOWN_TAGS = {0x0002: "Microsoft ADPCM", 0x0006: "A-law", 0x0007: "mu-law", 0x0011: "IMA ADPCM",
              0x0031: "GSM 6.10", 0x0050: "MPEG", 0x0055: "MP3", 0x00FF: "AAC", 0x0161: "WMA",
              0x1610: "HE-AAC", 0xF1AC: "FLAC"}
RESAMPLE = "resample it to 16 kHz mono, e.g. ffmpeg -i in.wav -ar 16000 -ac 1 out.wav"
FIX = "re-encode it as 16 kHz mono PCM WAV, e.g. ffmpeg -i in.wav -ar 16000 -ac 1 out.wav"
ARRAY_FIX = "pass a float32 NumPy array of mono 16 kHz samples in [-1, 1] (np.asarray(x, np.float32)) or the " \
            "path of a 16 kHz WAV file"

# -- the manifest's "speech" entry -------------------------------------------------------------------------------------

SPEECH = keys.table(
    Key("sampling_rate", int, required=True, limits=(8_000, 48_000)),
    Key("n_samples", int, required=True, limits=(1, 1 << 24)),
    Key("frames", int, required=True, limits=(1, 1 << 16)),
    Key("languages", dict, required=True),           # language token -> id
    Key("tasks", dict, required=True),               # task -> id
    Key("no_timestamps_token_id", int, required=True, nullable=True),
    Key("timestamps", dict, nullable=True),          # {"begin", "count"}; absent or null: none
    Key("suppress_tokens", list, required=True),
    Key("begin_suppress_tokens", list, required=True),
    Key("encoder_sha256", dict),                     # role -> the encoder's digest
    Key("shares_target_encoder", list, required=True),    # the drafts whose encoder graph is the target's
    Key("target_fingerprint", str),                  # the sha256 of the target's weights (export/families/whisper_drafts.py)
    Key("distilled_for", dict),                      # draft role -> the target fingerprint it was distilled for
)
SPEECH_NUMBERS = keys.numbers(SPEECH)      # sampling_rate, n_samples, frames
MODEL_TYPE = "whisper"                     # every model's architecture model_type in an export with the entry
SOURCE_DTYPE = "float32"                   # the encoder's input: PCM samples (SPEECH_INPUTS)
SPEECH_INPUTS = ("audio",)                 # the Whisper encoder graph's input: float32 PCM [batch, samples]


def check_entry(where: str, speech, vocab: int, models: dict) -> tuple[str, list] | None:
    """The manifest's "speech" entry (None: it has none), `where` naming manifest.json in messages: present exactly
    when the `models` (their architectures already checked) are Whisper ones; numbers in range, token ids inside the
    `vocab`, bounded lists and maps. None without the entry, else the encoder's input dtype and the drafts that keep
    the target's encoder (no encoder graph: the target's gives their K/V too)."""
    kinds = {model["architecture"].get("model_type") == MODEL_TYPE for model in models.values()}
    if kinds != {speech is not None}:
        keys.fail(where, "a 'speech' entry goes with Whisper models only, and every model of a Whisper export is one")
    if speech is None:
        return None
    speech = keys.obj(where, speech, "speech")
    for name, limits in SPEECH_NUMBERS.items():
        keys.integer(where, keys.member(where, speech, name, "speech"), f"speech {name}", *limits)
    for name in ("languages", "tasks"):
        table = keys.obj(where, keys.member(where, speech, name, "speech"), f"speech {name}")
        if len(table) > 512:
            keys.fail(where, f"speech {name} has {len(table)} entries (at most 512)")
        for key, value in table.items():
            keys.string(where, key, f"speech {name} key", 32)
            keys.integer(where, value, f"speech {name} {shown(key, 32)}", 0, vocab - 1)
    for name in ("suppress_tokens", "begin_suppress_tokens"):
        for value in keys.array(where, keys.member(where, speech, name, "speech"), f"speech {name}", vocab):
            keys.integer(where, value, f"speech {name} entry", 0, vocab - 1)
    nots = keys.member(where, speech, "no_timestamps_token_id", "speech")
    if nots is not None:
        keys.integer(where, nots, "speech no_timestamps_token_id", 0, vocab - 1)
    stamps = speech.get("timestamps")          # absent in exports made before timestamps: none
    if stamps is not None:
        stamps = keys.obj(where, stamps, "speech timestamps")
        begin = keys.integer(where, keys.member(where, stamps, "begin", "speech timestamps"),
                             "speech timestamps begin", 0, vocab - 1)
        keys.integer(where, keys.member(where, stamps, "count", "speech timestamps"), "speech timestamps count", 2,
                     vocab - begin)
    shared = keys.array(where, keys.member(where, speech, "shares_target_encoder", "speech"),
                        "speech shares_target_encoder", keys.MAX_MODELS)
    for role in shared:
        if role not in models or role == "target":
            keys.fail(where, f"speech shares_target_encoder names {shown(role, 40)}, not a draft model")
    check_fingerprints(where, speech, models)
    return SOURCE_DTYPE, shared


def check_fingerprints(where: str, speech: dict, models: dict) -> None:
    """A draft distilled for one target (speech distilled_for) runs with that target only: its fingerprint must be
    the export's target_fingerprint."""
    distilled = speech.get("distilled_for")
    if distilled is None:
        return
    distilled = keys.obj(where, distilled, "speech distilled_for")
    mine = speech.get("target_fingerprint")
    if mine is not None:
        keys.string(where, mine, "speech target_fingerprint", 64)
    for role, theirs in distilled.items():
        if role not in models or role == "target":
            keys.fail(where, f"speech distilled_for names {shown(role, 40)}, not a draft model")
        keys.string(where, theirs, f"speech distilled_for {shown(role, 40)}", 64)
        if theirs != mine:
            raise SpecdecError(f"{where}: the draft {shown(role, 40)} was distilled for another target (fingerprint "
                               f"{theirs[:12]}) than this export's ({'none recorded' if mine is None else mine[:12]})",
                               "export again with specdec-export --target TARGET, which attaches the draft made for "
                               "TARGET, or with --no-draft")


# -- audio in ----------------------------------------------------------------------------------------------------------


def check_audio(audio) -> np.ndarray:
    """The samples of `audio=` as a new C-contiguous 1-D float32 array: a path (str or os.PathLike) is read with
    read_wav; an array must be float32, of shape [samples] or [1, samples], non-empty and finite (module docstring).
    The caller's array is not modified."""
    if isinstance(audio, (str, os.PathLike)):
        return read_wav(audio)
    if not isinstance(audio, np.ndarray):
        raise SpecdecError(f"audio= is a {type(audio).__name__}, not a float32 NumPy array or a WAV file path",
                           ARRAY_FIX)
    array = np.asarray(audio)  # a subclass (a masked array, say) is read as its plain data
    if array.dtype != np.float32:
        scale = " (int16 PCM is on another scale: np.asarray(x, np.float32) / 32768)" \
            if array.dtype.kind in "iu" else ""
        raise SpecdecError(f"audio= has dtype {array.dtype}, not float32",
                           f"convert it with np.asarray(x, np.float32){scale}")
    if not (array.ndim == 1 or (array.ndim == 2 and array.shape[0] == 1)):
        raise SpecdecError(f"audio= has shape {list(array.shape)}, not [samples] or [1, samples]",
                           "pass one mono signal; mix channels to mono first (their mean over the channel axis)")
    if array.size == 0:
        raise SpecdecError("audio= has no samples", ARRAY_FIX)
    finite = np.isfinite(array)
    if not finite.all():
        nan = int(np.count_nonzero(np.isnan(array)))
        inf = array.size - int(np.count_nonzero(finite)) - nan
        first = int(np.argmin(finite.reshape(-1)))
        raise SpecdecError(f"audio= has {nan} NaN and {inf} infinite samples of {array.size} (the first at index "
                           f"{first})", "check the audio source; np.nan_to_num(x) replaces them with finite values")
    return np.array(array.reshape(-1), dtype=np.float32, order="C", copy=True)


def read_wav(path) -> np.ndarray:
    """The 16 kHz mono float32 samples of the RIFF/WAVE file at `path`, checked as in the module docstring."""
    if not isinstance(path, (str, os.PathLike)):
        raise SpecdecError(f"the WAV path is a {type(path).__name__}, not a str or os.PathLike", ARRAY_FIX)
    try:
        name = os.fsdecode(path)
    except (TypeError, ValueError) as err:
        raise SpecdecError(f"the WAV path is not a file name ({type(err).__name__})", ARRAY_FIX) from None
    what = f"the WAV file {shown(name, 160)}"
    data = _read(name, what)
    return _parse(data, what)


def _read(name: str, what: str) -> bytes:
    """The file's bytes, read once: a regular file of at most MAX_WAV_BYTES."""
    try:
        info = os.stat(name)
        if stat.S_ISDIR(info.st_mode):
            raise SpecdecError(f"{what} is a directory", "pass the path of a .wav file")
        if not stat.S_ISREG(info.st_mode):
            raise SpecdecError(f"{what} is not a regular file", "pass the path of a .wav file")
        if info.st_size > MAX_WAV_BYTES:
            raise SpecdecError(f"{what} is {info.st_size} bytes, over the {MAX_WAV_BYTES >> 30} GiB limit",
                               "split it into shorter files (e.g. with ffmpeg -ss/-t) or pass the samples as an array")
        with open(name, "rb") as fh:
            data = fh.read(MAX_WAV_BYTES + 1)
    except SpecdecError:
        raise
    except FileNotFoundError:
        raise SpecdecError(f"{what} does not exist", "check the path") from None
    except (OSError, ValueError) as err:  # ValueError: a NUL in the name
        detail = getattr(err, "strerror", None) or type(err).__name__
        raise SpecdecError(f"{what} cannot be read ({detail})", "check the path and its permissions") from None
    except MemoryError:
        raise SpecdecError(f"{what} does not fit in memory", "split it into shorter files") from None
    if len(data) > MAX_WAV_BYTES:  # it grew after the stat
        raise SpecdecError(f"{what} is over the {MAX_WAV_BYTES >> 30} GiB limit", "split it into shorter files")
    return data


def _parse(data: bytes, what: str) -> np.ndarray:
    size = len(data)
    if size < 12:
        raise SpecdecError(f"{what} is {size} bytes, too short for a RIFF/WAVE header (12 bytes)", FIX)
    magic, riff_size, form = struct.unpack_from("<4sI4s", data, 0)
    if magic in (b"RIFX", b"RF64") and form == b"WAVE":
        raise SpecdecError(f"{what} is a {magic.decode()} file, not little-endian RIFF/WAVE", FIX)
    if magic != b"RIFF" or form != b"WAVE":
        raise SpecdecError(f"{what} is not a RIFF/WAVE file (it starts with {_tag(magic)}, {_tag(form)})", FIX)
    end = 8 + riff_size
    if riff_size < 4 or end > size:
        raise SpecdecError(f"{what} is truncated or damaged: its RIFF header gives {end} bytes, the file has {size}",
                           FIX)
    chunks = {}
    pos, count = 12, 0
    while pos < end:
        count += 1
        if count > MAX_CHUNKS:
            raise SpecdecError(f"{what} has more than {MAX_CHUNKS} chunks", FIX)
        if pos + 8 > end:
            raise SpecdecError(f"{what} is truncated: {end - pos} stray bytes at offset {pos}, too few for a chunk "
                               "header", FIX)
        cid, csize = struct.unpack_from("<4sI", data, pos)
        body = pos + 8
        if csize > end - body:
            raise SpecdecError(f"{what} is truncated or damaged: chunk {_tag(cid)} at offset {pos} gives {csize} "
                               f"bytes, past the end of the file ({end - body} bytes left)", FIX)
        if cid in (b"fmt ", b"data"):
            if cid in chunks:
                raise SpecdecError(f"{what} has more than one {_tag(cid)} chunk", FIX)
            chunks[cid] = (body, csize)
        pos = body + csize + (csize & 1)
        if pos == end + 1:  # the last chunk's pad byte is missing: tolerated
            break
    for cid in (b"fmt ", b"data"):
        if cid not in chunks:
            raise SpecdecError(f"{what} has no {_tag(cid)} chunk", FIX)
    channels, rate, bits, is_float = _format(data, *chunks[b"fmt "], what)
    body, csize = chunks[b"data"]
    align = channels * bits // 8
    if csize % align:
        raise SpecdecError(f"{what} has a data chunk of {csize} bytes, not a multiple of its block align {align} "
                           f"({channels} channels x {bits // 8} bytes)", FIX)
    frames = csize // align
    if frames == 0:
        raise SpecdecError(f"{what} has no samples (its data chunk is empty)", "pass a file with audio in it")
    if rate != SAMPLE_RATE:
        raise SpecdecError(f"{what} has a sample rate of {rate} Hz; Whisper takes {SAMPLE_RATE} Hz", RESAMPLE)
    return _samples(data, body, frames, channels, bits, is_float, what)


def _format(data: bytes, body: int, csize: int, what: str) -> tuple[int, int, int, bool]:
    """(channels, rate, container bits, is_float) from the fmt chunk, checked."""
    if csize < 16:
        raise SpecdecError(f"{what} has a fmt chunk of {csize} bytes, shorter than 16", FIX)
    tag, channels, rate, _byte_rate, align, bits = struct.unpack_from("<HHIIHH", data, body)
    if tag == EXTENSIBLE:
        if csize < 40:
            raise SpecdecError(f"{what} has a WAVE_FORMAT_EXTENSIBLE fmt chunk of {csize} bytes, shorter than 40", FIX)
        extra, valid, _mask, sub = struct.unpack_from("<HHI16s", data, body + 16)
        if extra < 22:
            raise SpecdecError(f"{what} has a WAVE_FORMAT_EXTENSIBLE fmt chunk with cbSize {extra}, under 22", FIX)
        if sub[2:] != GUID_TAIL:
            raise SpecdecError(f"{what} is not PCM: its WAVE_FORMAT_EXTENSIBLE sub-format GUID is {sub.hex()}", FIX)
        tag = int.from_bytes(sub[:2], "little")
        if valid > bits:
            raise SpecdecError(f"{what} has {valid} valid bits in a {bits}-bit sample", FIX)
    if tag not in (PCM, IEEE_FLOAT):
        name = f" ({KNOWN_TAGS[tag]})" if tag in KNOWN_TAGS else ""
        raise SpecdecError(f"{what} is not PCM: format tag 0x{tag:04X}{name}; only PCM and IEEE float are read", FIX)
    allowed = PCM_BITS if tag == PCM else FLOAT_BITS
    kind = "PCM" if tag == PCM else "IEEE float"
    if bits not in allowed:
        raise SpecdecError(f"{what} has unsupported {bits}-bit {kind} samples (read: "
                           f"{', '.join(map(str, allowed))}-bit)", FIX)
    if channels == 0 or channels > MAX_CHANNELS:
        raise SpecdecError(f"{what} has {channels} channels (read: 1 to {MAX_CHANNELS})", FIX)
    if align != channels * bits // 8:
        raise SpecdecError(f"{what} has a block align of {align} bytes, not {channels * bits // 8} ({channels} "
                           f"channels x {bits // 8} bytes)", FIX)
    return channels, rate, bits, tag == IEEE_FLOAT


def _samples(data: bytes, offset: int, frames: int, channels: int, bits: int, is_float: bool,
             what: str) -> np.ndarray:
    """Mono float32: the channels' mean, computed in float64 a block of frames (about BLOCK_SAMPLES samples) at a
    time, rounded once."""
    width = bits // 8
    raw = np.frombuffer(data, np.uint8, frames * channels * width, offset).reshape(frames, channels, width)
    out = np.empty(frames, np.float32)
    scale = float(channels) if is_float else float(channels) * 2.0 ** (bits - 1)
    with np.errstate(all="ignore"):
        step = max(1, BLOCK_SAMPLES // channels)
        for start in range(0, frames, step):
            block = raw[start:start + step]
            if is_float:
                values = block.copy().view(f"<f{width}").reshape(len(block), channels)
                total = values.astype(np.float64).sum(axis=1)
            else:
                total = _integers(block, width).sum(axis=1, dtype=np.int64).astype(np.float64)
            out[start:start + len(block)] = total / scale
    finite = np.isfinite(out)
    if not finite.all():
        bad = frames - int(np.count_nonzero(finite))
        raise SpecdecError(f"{what} has {bad} samples that are NaN, infinite or beyond float32's range (the first at "
                           f"frame {int(np.argmin(finite))})", "check the file's source, or re-encode it as 16-bit PCM")
    return out


def _integers(block: np.ndarray, width: int) -> np.ndarray:
    """The PCM samples of a [frames, channels, width] uint8 block as signed integers (8-bit: minus 128)."""
    if width == 1:
        return block[..., 0].astype(np.int16) - 128
    if width == 3:
        low = block[..., 0].astype(np.int32) | (block[..., 1].astype(np.int32) << 8)
        return low | (block[..., 2].view(np.int8).astype(np.int32) << 16)
    return block.copy().view(f"<i{width}")[..., 0]


def _tag(value: bytes) -> str:
    return shown(value.decode("latin-1"), 24)
