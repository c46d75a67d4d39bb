"""The peers `specdec-bench` times a Whisper export against, on the same weights and clips: faster-whisper (what most
people run Whisper with on CPUs: CTranslate2 underneath) at compute_type "float32" and "int8", and transformers'
greedy `generate` on PyTorch.

    FasterWhisperPeer(folder, compute_type, threads)   a CTranslate2 conversion of the checkpoint (with tokenizer.json
                                                       and preprocessor_config.json copied in, see below)
        .transcribe(audio, language)                   <= 30 s, greedy, no timestamps
        .transcribe_long(audio, language, batched=False, batch_size=8, vad=False)
                                                       > 30 s: faster-whisper's sequential long form (timestamps on),
                                                       or its BatchedInferencePipeline (batched=True)
    TransformersPeer(folder, threads)                  the transformers checkpoint itself
        .transcribe(audio, language)                   <= 30 s, greedy (num_beams=1, do_sample=False)
        .transcribe_long(audio, language)              > 30 s: transformers' sequential long form, timestamps on

Every call returns a PeerResult: the text, the token ids, the wall time of the whole call in ms (front end, encoder,
decoding, segmentation: for faster-whisper its lazy segment generator is consumed inside the timing) and, where it
can be read, the encoder's share of it.

Token ids, one convention for both peers. `token_ids` are the text tokens the model generated after its prompt, in
order, across all windows and segments: the ids below <|endoftext|> (in Whisper's vocabulary every special token,
language, task and timestamp token sits at or above <|endoftext|>). The prompt (<|startoftranscript|>, language,
task, <|notimestamps|>, and for long form the per-window prompt), <|endoftext|> and the timestamp tokens are not in
it. `generated_ids` keeps everything generated after the prompt but <|endoftext|> (timestamps and any other special
token the model emitted), as each library returned it, for looking closer.
    faster-whisper: the concatenation of its segments' `tokens`. It leaves out a segment whose text is blank (and,
        with a no_speech_threshold, a window it judges silent: off by default here), so a window that generated
        only whitespace tokens shows as no tokens where transformers shows them.
    transformers: `generate`'s sequences (transformers 5 returns the generated ids without the decoder prompt; a
        leading prompt, as older versions returned it, is cut).

What differs between the two, and which to compare with which:
  * The front end. transformers' WhisperFeatureExtractor pads the *waveform* with zeros to 30 s, then takes the
    log-mel of the padded window (its clamp at max - 8, in log10 units, and the silent frames' values come from that
    window). faster-whisper computes the log-mel of the clip as it is (its own numpy STFT: 160 zero samples
    appended, reflect padding of n_fft/2 at both ends, a Hann window, the last frame dropped; librosa's Slaney mel
    filters rebuilt in numpy; the clamp at max - 8 over the clip's own frames) and then pads the *log-mel* with zeros
    to 3,000 frames (audio.pad_or_trim). A zero in the normalised log-mel is log10 = -4, not the silence value, so a
    clip shorter than 30 s reaches the encoder as different features and its transcript may differ from
    transformers'. A clip of exactly 30 s whose last 50 ms are digital silence gets the same features up to float
    rounding (~1e-5), and then (tests/bench/test_whisper_peers.py) the same greedy tokens.
  * Suppressed tokens. transformers suppresses the generation config's suppress_tokens (and begin_suppress_tokens
    at the first step). faster-whisper's default, suppress_tokens=[-1], rebuilds a list from tokenizer.json
    (openai's non-speech symbols) plus the task and start tokens; here the default is the converted model's own
    list (config.json's suppress_ids, which the converter copies from the generation config), so both suppress the
    same ids by construction. suppress_tokens="faster-whisper" picks its default instead. CTranslate2 applies the
    begin-suppress list (config.json's suppress_ids_begin) at the first step with suppress_blank=True, as
    transformers does.
  * Length. CTranslate2 decodes at most min(max_length // 2, max_length - prompt + 1) tokens a window (openai's
    sample_len = n_text_ctx // 2 = 224 with max_length 448); TransformersPeer caps max_new_tokens at the same 224 by
    default, so a window that never ends stops at the same place in both.
  * Multilingual or not. CTranslate2 (4.7 and later) calls a model multilingual when its vocabulary holds the empty
    string as a token (openai's multilingual vocabularies do: their last text token); otherwise faster-whisper drops
    the language and task tokens from the prompt ([<|startoftranscript|>, <|notimestamps|>]).

So: compare speed with faster-whisper (fp32 and int8), exactness with transformers (the same features in, the same
greedy tokens out); faster-whisper's transcripts agree with transformers' where the padding does not matter.

Threads. faster-whisper passes cpu_threads to CTranslate2's intra_threads (OpenMP threads; 0 means OMP_NUM_THREADS
if set, else min(4, cores)); a nonzero value overrides OMP_NUM_THREADS. num_workers=1: one replica, no parallel
calls. Its numpy front end runs outside CTranslate2 (numpy's FFT is single-threaded; the mel matmul uses numpy's
BLAS threads). TransformersPeer calls torch.set_num_threads(threads), which is process-wide.

int8. CTranslate2 resolves compute_type "int8" on a CPU to "int8_float32" (int8 weights and GEMMs, float32
elsewhere); FasterWhisperPeer.compute_type reports what it resolved to.
"""

from __future__ import annotations

import importlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from specdec.runtime.core.errors import SpecdecError, first_line

SAMPLE_RATE = 16_000
WINDOW_S = 30.0                  # the encoder's window (1,500 positions = 3,000 mel frames)
MAX_NEW_TOKENS = 224             # CTranslate2's per-window cap at max_length 448 (openai's sample_len)
FASTER_WHISPER_INSTALL = "pip install faster-whisper"
CONVERT_FIX = ("convert the transformers checkpoint with ct2-transformers-converter --model CHECKPOINT --output_dir "
               "FOLDER --copy_files tokenizer.json preprocessor_config.json (or ctranslate2.converters."
               "TransformersConverter(CHECKPOINT, copy_files=[\"tokenizer.json\", \"preprocessor_config.json\"])"
               ".convert(FOLDER))")


@dataclass
class PeerResult:
    """One transcription by a peer. token_ids: the generated text tokens (ids below <|endoftext|>; no prompt, no
    <|endoftext|>, no timestamps); generated_ids: every id generated after the prompt but <|endoftext|>; ms: wall
    time of the whole call; encoder_ms: the encoder's share (None where it cannot be read); encoder_calls: how
    often the encoder ran (once per window; a batched call runs several windows at once); segments: the segments
    the peer returned."""

    text: str
    token_ids: list
    ms: float
    encoder_ms: float | None = None
    generated_ids: list = field(default_factory=list)
    encoder_calls: int = 1
    segments: int = 1


def text_tokens(ids, eot: int) -> list:
    """The text tokens of `ids`: those below <|endoftext|> (every Whisper special and timestamp token is at or
    above it)."""
    return [int(t) for t in ids if int(t) < eot]


def _audio(audio) -> np.ndarray:
    wave = np.asarray(audio)
    if wave.ndim != 1 or not np.issubdtype(wave.dtype, np.floating):
        raise SpecdecError(f"the audio is a {wave.dtype} array of shape {wave.shape}",
                           "pass 16 kHz mono float32 PCM as a 1-D numpy array")
    return np.ascontiguousarray(wave, dtype=np.float32)


def _short(wave: np.ndarray, peer: str) -> None:
    if len(wave) > WINDOW_S * SAMPLE_RATE:
        raise SpecdecError(f"{peer}.transcribe takes at most 30 s of audio, got {len(wave) / SAMPLE_RATE:.1f} s",
                           "use transcribe_long for longer audio")


def import_faster_whisper(name: str = "faster_whisper"):
    """The faster_whisper module, or a one-line SpecdecError saying how to install it."""
    try:
        return importlib.import_module(name)
    except ImportError as err:
        raise SpecdecError(f"faster-whisper is not installed ({first_line(err)})", FASTER_WHISPER_INSTALL) from None


class _EncoderClock:
    """Adds up the wall time of a callable's calls (the encoder's), passing its arguments and result through."""

    def __init__(self, fn):
        self.fn, self.ms, self.calls = fn, 0.0, 0

    def reset(self) -> None:
        self.ms, self.calls = 0.0, 0

    def __call__(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.ms += (time.perf_counter() - started) * 1000.0
            self.calls += 1


class FasterWhisperPeer:
    """faster_whisper.WhisperModel on a CTranslate2 folder, on the CPU, one worker, `threads` intra-op threads, run
    as greedy as it goes: beam_size=1, best_of=1, temperature 0 only (no fallback), no conditioning on the previous
    window, no VAD, no word timestamps, no silent-window skipping (no_speech_threshold=None; pass 0.6 for
    faster-whisper's default), and the model's own suppress list (suppress_tokens="model"; "faster-whisper" for its
    default [-1], or a list of ids).

    `folder` must hold model.bin and tokenizer.json (faster-whisper would otherwise download openai's tokenizer
    from the hub); without preprocessor_config.json faster-whisper assumes 80 mel bins, which is checked against
    the encoder (the published tiny, base, small and medium folders have none, and 80 bins)."""

    name = "faster-whisper"

    def __init__(self, folder, compute_type: str = "float32", threads: int = 1, *, suppress_tokens="model",
                 no_speech_threshold: float | None = None):
        fw = import_faster_whisper()
        import ctranslate2

        folder = Path(folder)
        if not folder.is_dir():
            raise SpecdecError(f"{folder} is not a folder (faster-whisper would look it up on the Hugging Face hub)",
                               "pass the folder of a CTranslate2 conversion of the checkpoint")
        missing = [n for n in ("model.bin", "tokenizer.json") if not (folder / n).is_file()]
        if missing:
            raise SpecdecError(f"{folder} is not a CTranslate2 Whisper folder with its tokenizer: no "
                               f"{', '.join(missing)}", CONVERT_FIX)
        supported = sorted(ctranslate2.get_supported_compute_types("cpu"))
        if compute_type not in supported and compute_type not in ("default", "auto"):
            raise SpecdecError(f"CTranslate2 {ctranslate2.__version__} cannot run compute_type {compute_type!r} on "
                               f"this CPU", f"use one of {', '.join(supported)}")
        try:
            self.model = fw.WhisperModel(str(folder), device="cpu", compute_type=compute_type, cpu_threads=threads,
                                         num_workers=1, local_files_only=True)
        except Exception as err:     # ctranslate2 raises RuntimeError/ValueError, tokenizers an Exception of its own
            raise SpecdecError(f"faster-whisper cannot load {folder}: {first_line(err)}", CONVERT_FIX) from None
        mels, front = self.model.model.n_mels, self.model.feature_extractor.mel_filters.shape[0]
        if mels != front:
            raise SpecdecError(f"{folder}: the encoder takes {mels} mel bins but preprocessor_config.json makes "
                               f"{front}", "copy the checkpoint's own preprocessor_config.json into the folder "
                               "(without one faster-whisper makes 80)")
        self.folder, self.threads, self.requested = folder, threads, compute_type
        self.compute_type = self.model.model.compute_type          # "int8" on a CPU resolves to "int8_float32"
        self.version = getattr(fw, "__version__", "?")
        self.ctranslate2_version = ctranslate2.__version__
        self.multilingual = self.model.model.is_multilingual
        self.eot = self.model.hf_tokenizer.token_to_id("<|endoftext|>")
        self.no_speech_threshold = no_speech_threshold
        if isinstance(suppress_tokens, str):
            if suppress_tokens == "model":
                config = json.loads((folder / "config.json").read_text()) if (folder / "config.json").is_file() else {}
                suppress_tokens = list(config.get("suppress_ids") or [-1])
            elif suppress_tokens == "faster-whisper":
                suppress_tokens = [-1]
            else:
                raise SpecdecError(f"suppress_tokens={suppress_tokens!r}",
                                   'pass "model", "faster-whisper" or a list of token ids')
        self.suppress_tokens = [int(t) for t in suppress_tokens]
        self.clock = _EncoderClock(self.model.encode)
        self.model.encode = self.clock          # the instance's encode: transcribe and the batched pipeline call it
        self.batched = None

    def options(self, language) -> dict:
        return dict(language=language, task="transcribe", beam_size=1, best_of=1, patience=1.0, temperature=[0.0],
                    condition_on_previous_text=False, vad_filter=False, word_timestamps=False,
                    no_speech_threshold=self.no_speech_threshold, log_prob_threshold=None,
                    compression_ratio_threshold=None, suppress_tokens=list(self.suppress_tokens), log_progress=False)

    def timed(self, call) -> PeerResult:
        self.clock.reset()
        started = time.perf_counter()
        segments, _info = call()
        segments = list(segments)                # the generator does the work: consume it inside the timing
        ms = (time.perf_counter() - started) * 1000.0
        generated = [int(t) for s in segments for t in s.tokens if int(t) != self.eot]
        return PeerResult(text="".join(s.text for s in segments).strip(), token_ids=text_tokens(generated, self.eot),
                          ms=ms, encoder_ms=self.clock.ms if self.clock.calls else None, generated_ids=generated,
                          encoder_calls=self.clock.calls, segments=len(segments))

    def transcribe(self, audio, language: str | None = "en") -> PeerResult:
        """Greedy transcription of at most 30 s (one window, without_timestamps=True); language=None: detected."""
        wave = _audio(audio)
        _short(wave, "FasterWhisperPeer")
        return self.timed(lambda: self.model.transcribe(wave, without_timestamps=True, **self.options(language)))

    def transcribe_long(self, audio, language: str | None = "en", *, batched: bool = False, batch_size: int = 8,
                        vad: bool = False) -> PeerResult:
        """Audio of any length with timestamps. batched=False: faster-whisper's sequential long form (a window
        starts where the last one's timestamps end). batched=True: its BatchedInferencePipeline, `batch_size`
        windows per CTranslate2 call, the audio cut into fixed 30 s windows (vad=False) or by Silero VAD (vad=True,
        the pipeline's own default); the pipeline decodes each window on its own, without timestamps (its
        default)."""
        wave = _audio(audio)
        if not batched:
            return self.timed(lambda: self.model.transcribe(wave, without_timestamps=False, **self.options(language)))
        fw = import_faster_whisper()
        if not hasattr(fw, "BatchedInferencePipeline"):
            raise SpecdecError(f"faster-whisper {self.version} has no BatchedInferencePipeline",
                               "pip install -U faster-whisper (1.1 or later)")
        if self.batched is None:
            self.batched = fw.BatchedInferencePipeline(model=self.model)
        options = self.options(language)       # the pipeline ignores condition_on_previous_text and the thresholds
        seconds = len(wave) / SAMPLE_RATE
        clips = None if vad else [{"start": s, "end": min(s + WINDOW_S, seconds)}
                                  for s in np.arange(0.0, seconds, WINDOW_S).tolist()]
        return self.timed(lambda: self.batched.transcribe(wave, batch_size=batch_size, without_timestamps=True,
                                                          clip_timestamps=clips, **{**options, "vad_filter": vad}))


class TransformersPeer:
    """WhisperForConditionalGeneration and WhisperProcessor from a transformers checkpoint folder, fp32 on the CPU
    with torch.set_num_threads(threads), greedy generate (num_beams=1, do_sample=False), language and
    task="transcribe" for a multilingual model, at most max_new_tokens=224 a window (CTranslate2's cap)."""

    name = "transformers"

    def __init__(self, folder, threads: int = 1, *, max_new_tokens: int | None = MAX_NEW_TOKENS):
        try:
            import torch
            import transformers
            from transformers import WhisperForConditionalGeneration, WhisperProcessor
        except ImportError as err:
            raise SpecdecError(f"transformers is not installed ({first_line(err)})",
                               "pip install 'specdec[bench]'") from None
        folder = Path(folder)
        if not (folder / "config.json").is_file():
            raise SpecdecError(f"{folder} is not a transformers checkpoint folder (no config.json)",
                               "pass the folder the Whisper checkpoint was saved to")
        torch.set_num_threads(threads)
        try:
            self.model = WhisperForConditionalGeneration.from_pretrained(str(folder), local_files_only=True).eval()
            self.processor = WhisperProcessor.from_pretrained(str(folder), local_files_only=True)
        except Exception as err:
            raise SpecdecError(f"transformers cannot load the Whisper checkpoint {folder}: {first_line(err)}",
                               "pass a folder saved by save_pretrained with its feature extractor and tokenizer") \
                from None
        self.torch, self.folder, self.threads = torch, folder, threads
        self.version = transformers.__version__
        gen = self.model.generation_config
        self.eot = int(gen.eos_token_id[0] if isinstance(gen.eos_token_id, (list, tuple)) else gen.eos_token_id)
        self.start = int(gen.decoder_start_token_id)
        no_timestamps = getattr(gen, "no_timestamps_token_id", None)
        self.prompt_end = int(no_timestamps) if no_timestamps is not None else self.start   # the prompt's last id
        self.multilingual = bool(getattr(gen, "is_multilingual", False))
        if self.multilingual and not hasattr(gen, "lang_to_id"):
            raise SpecdecError(f"{folder}/generation_config.json has no lang_to_id (transformers {self.version} keeps "
                               "a generation config's extra fields only when it was not derived from the model config)",
                               'save the checkpoint with generation_config._from_model_config = False')
        self.max_new_tokens = max_new_tokens
        self.encoder_ms, self.encoder_calls, self.encoder_started = 0.0, 0, None
        encoder = self.model.get_encoder()
        encoder.register_forward_pre_hook(self.encoder_start)
        encoder.register_forward_hook(self.encoder_end)

    def encoder_start(self, *_):
        self.encoder_started = time.perf_counter()

    def encoder_end(self, *_):
        self.encoder_ms += (time.perf_counter() - self.encoder_started) * 1000.0
        self.encoder_calls += 1

    def language_options(self, language) -> dict:
        if self.multilingual:
            return dict(language=language, task="transcribe")
        if language not in (None, "en"):
            raise SpecdecError(f"{self.folder} is an English-only Whisper; language={language!r}",
                               'pass language="en" or None')
        return {}

    def result(self, started: float, sequences) -> PeerResult:
        ms = (time.perf_counter() - started) * 1000.0
        ids = [int(t) for t in sequences]
        if ids and ids[0] == self.start:        # older transformers return the decoder prompt too: cut it
            while ids and self.start <= ids[0] <= self.prompt_end:
                ids.pop(0)
        generated = [t for t in ids if t != self.eot]
        return PeerResult(text=self.processor.tokenizer.decode(text_tokens(generated, self.eot),
                                                              skip_special_tokens=True).strip(),
                          token_ids=text_tokens(generated, self.eot), ms=ms,
                          encoder_ms=self.encoder_ms if self.encoder_calls else None, generated_ids=generated,
                          encoder_calls=self.encoder_calls, segments=1)

    def transcribe(self, audio, language: str | None = "en") -> PeerResult:
        """Greedy transcription of at most 30 s: the feature extractor pads the waveform to 30 s; language=None:
        detected (multilingual models)."""
        wave = _audio(audio)
        _short(wave, "TransformersPeer")
        self.encoder_ms, self.encoder_calls = 0.0, 0
        started = time.perf_counter()
        features = self.processor.feature_extractor(wave, sampling_rate=SAMPLE_RATE, return_tensors="pt")
        with self.torch.inference_mode():
            out = self.model.generate(features.input_features, num_beams=1, do_sample=False,
                                      max_new_tokens=self.max_new_tokens, return_timestamps=False,
                                      **self.language_options(language))
        return self.result(started, out[0])

    def transcribe_long(self, audio, language: str | None = "en") -> PeerResult:
        """transformers' sequential long form (audio past 30 s: windows that start where the last one's timestamps
        end), greedy, timestamps on, no conditioning on the previous window, no temperature fallback. Audio of at
        most 30 s goes through one window with timestamps."""
        wave = _audio(audio)
        self.encoder_ms, self.encoder_calls = 0.0, 0
        started = time.perf_counter()
        long = len(wave) > WINDOW_S * SAMPLE_RATE
        features = self.processor.feature_extractor(
            wave, sampling_rate=SAMPLE_RATE, return_tensors="pt", return_attention_mask=True,
            **(dict(truncation=False, padding="longest") if long else {}))
        with self.torch.inference_mode():
            out = self.model.generate(features.input_features, attention_mask=features.attention_mask, num_beams=1,
                                      do_sample=False, return_timestamps=True, condition_on_prev_tokens=False,
                                      max_new_tokens=self.max_new_tokens, **self.language_options(language))
        sequences = out["sequences"] if isinstance(out, dict) or hasattr(out, "sequences") else out
        return self.result(started, sequences[0])
