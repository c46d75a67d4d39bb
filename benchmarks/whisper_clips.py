"""Held-out English speech clips for measuring Whisper exports: everyday sentences (SENTENCES, written here: names,
numbers, dates, questions, conversation, instructions) spoken by espeak-ng voices and speeds that the speech pair
does not train on, as 16 kHz mono WAV files of 2 to 8 seconds and a clips.jsonl that the benchmark's --prompts
reads (benchmarks/common/prompts.py):

    python -m specdec.bench.whisper_clips --out clips [--count 60] [--seed 0] [--language en]
    python -m specdec.bench.whisper_clips --out long --long [--count 1] [--seed 0]

    clips/0001.wav, 0002.wav, ...
    clips/clips.jsonl    {"audio": "0001.wav", "reference": "the sentence", "voice": "en-us+m2 170 wpm pitch 44",
                          "task": "everyday", "kind": "question", "seconds": 3.41}

--long writes recordings of 45 to 90 seconds instead (long-audio tests: Whisper's 30-second windows): each is one
voice reading sentences one after another with pauses of 0.3 to 0.9 s between them; its line has task "long", the
whole text as the reference and each sentence's start, end and text under "segments".

The voices (HELD_OUT_VOICES) are espeak-ng's English voices and variants that models/speech_synth.py keeps out of
VOICES, among them its HELD_OUT voice, at speeds outside SPEEDS; the sentences are none of the training corpus's
(Debian package descriptions). Numbers, times and prices are written as people write them ("3:30 pm", "$25.50"):
compare transcripts after a normaliser, or compare a speculative run with its target's greedy run, which is what
exactness needs. The clips carry no "language" key unless --language is given (None suits an English-only model
such as tiny.en; a multilingual one then detects it).

--human ROOT takes real recordings instead (HUMAN_SOURCES): Allison Smith's telephone prompts from Debian's
asterisk-core-sounds-en-wav (CC-BY-SA-3.0; 8 kHz, resampled to 16 kHz; transcripts from asterisk-core-sounds-en)
and five LibriVox audiobook sentences (public domain) from pocketsphinx-testdata, those of 2 to 8 s, task "human":

    apt-get download asterisk-core-sounds-en-wav asterisk-core-sounds-en pocketsphinx-testdata
    for deb in *.deb; do dpkg-deb -x "$deb" debs; done
    python -m specdec.bench.whisper_clips --out human --human debs      # or --human / after apt-get install

Deterministic for a seed: the same seed and count give the same sentences, voices, speeds and pauses; the samples
are the same when written by a fresh process (the command line is one), since espeak-ng's waveform state carries
over within a process (models/speech_synth.py).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specdec.runtime.core.errors import OneLineParser, SpecdecError, run_cli

RATE = 16_000
MIN_S, MAX_S = 2.0, 8.0             # a clip's length
LONG_MIN_S, LONG_MAX_S = 45.0, 90.0  # a --long recording's length

# espeak-ng voices that models/speech_synth.py's VOICES does not hold: its HELD_OUT voice, the RP voice without the
# +m3 variant it trains with, and variants (formant sets m1..m7, f1..f5 and named ones) of the other English voices
# (en+f2 is left out: Whisper base misheard almost half its words, against 10 to 33% for these)
HELD_OUT_VOICES = ("en-gb-x-gbcwmd", "en-gb-x-rp", "en-us+m2", "en-029+m5", "en-us-nyc+m7", "en-gb-scotland+f4",
                   "en-gb-x-gbclan+m1", "en+Annie", "en-us+david", "en-gb-x-gbcwmd+f1", "en-us+steph")
# words per minute, none of SPEEDS (135, 160, 185); 210 is HELD_OUT's
HELD_OUT_SPEEDS = (125, 150, 170, 195, 210)
PITCHES = (35, 65)                  # a pitch is drawn from this range (espeak-ng's default is 50)

# (kind, sentence): everyday English, 7 to 16 words, so that 2 to 8 seconds at 125 to 210 words per minute
SENTENCES = (
    # names
    ("names", "Maria and Thomas are driving up from Chicago on Friday night."),
    ("names", "Please tell Doctor Patel that her nine o'clock patient is here."),
    ("names", "My neighbor Olivia just adopted a grey cat called Pepper."),
    ("names", "Ask James whether he still wants tickets for the Saturday show."),
    ("names", "Grandma Rose sent us a postcard from her trip to Lisbon."),
    ("names", "Kevin left his umbrella at Sarah's place again."),
    ("names", "The new coach, Mister Okafor, starts training the team next week."),
    ("names", "Emily and her brother Daniel both work at the bakery on Main Street."),
    ("names", "Have you met Hannah, the woman who moved in across the hall?"),
    ("names", "Our teacher, Miss Lopez, read us a story before lunch."),
    ("names", "Jack says the best pizza in Boston is near the harbor."),
    ("names", "Sophie called to say that Liam will pick up the kids today."),
    # numbers
    ("numbers", "The total comes to $25.50, including the tip."),
    ("numbers", "Our flight leaves from gate 42 at 6:15 in the morning."),
    ("numbers", "She ran five miles this morning in just under forty minutes."),
    ("numbers", "There are about three hundred people waiting outside the stadium."),
    ("numbers", "You can reach me at extension 214 until five."),
    ("numbers", "The recipe needs two cups of flour and three eggs."),
    ("numbers", "We live on the fourth floor, apartment 12B."),
    ("numbers", "The bus comes every twenty minutes on weekdays."),
    ("numbers", "I paid eighty dollars for these shoes, and they already hurt."),
    ("numbers", "The train was delayed by almost an hour and a half."),
    ("numbers", "Only seven of the twelve apples in the bag were still good."),
    ("numbers", "Room 305 is at the end of the corridor on your left."),
    # dates
    ("dates", "The meeting moved to Tuesday, March 14th at 3:30 pm."),
    ("dates", "My sister's birthday is on the second of August."),
    ("dates", "We got married in June 2015, on a very rainy afternoon."),
    ("dates", "The library will be closed from December 24th until January 2nd."),
    ("dates", "School starts again on the first Monday in September."),
    ("dates", "The rent is due on the fifth of every month."),
    ("dates", "I haven't seen him since the summer of 2019."),
    ("dates", "Let's plan the trip for the last weekend in October."),
    ("dates", "The store opens at nine on Sundays and closes at six."),
    ("dates", "Her grandfather was born in 1948 in a small village by the sea."),
    ("dates", "Next Thursday is a holiday, so the office will be empty."),
    ("dates", "Can we push the dentist appointment to Wednesday afternoon?"),
    # questions
    ("question", "Do you know where I left my car keys?"),
    ("question", "What time does the pharmacy close tonight?"),
    ("question", "Would you like tea or coffee with your breakfast?"),
    ("question", "How long does it take to walk to the station from here?"),
    ("question", "Is anyone sitting in this seat, or can I take it?"),
    ("question", "Why is the baby crying again, is he hungry?"),
    ("question", "Which way is the nearest post office, please?"),
    ("question", "Did you remember to water the plants before you left?"),
    ("question", "Could you turn the music down a little, please?"),
    ("question", "Where should we go for dinner on your birthday?"),
    ("question", "Have you finished reading the book I lent you last month?"),
    ("question", "Are we still meeting at the park after work?"),
    # conversation
    ("conversation", "I'm sorry I'm late, the traffic was terrible this morning."),
    ("conversation", "Thanks so much for dinner, it was absolutely delicious."),
    ("conversation", "No worries, we can always try again tomorrow."),
    ("conversation", "I think it might rain later, so bring a jacket."),
    ("conversation", "That sounds like a great idea, count me in."),
    ("conversation", "We had a lovely time at the beach last weekend."),
    ("conversation", "To be honest, I didn't really enjoy the movie."),
    ("conversation", "My phone battery is almost dead, can I call you back?"),
    ("conversation", "I'll be home around seven, so don't wait for me to eat."),
    ("conversation", "It was nice talking to you, have a good evening."),
    ("conversation", "The kids loved the museum, especially the dinosaur room."),
    ("conversation", "Honestly, I could sleep for a whole week right now."),
    # instructions
    ("instructions", "Turn left at the second traffic light and park behind the church."),
    ("instructions", "Preheat the oven and butter the pan before you mix the batter."),
    ("instructions", "Please take off your shoes before you come inside."),
    ("instructions", "Keep the receipt in case you need to return the jacket."),
    ("instructions", "Fill out this form and bring it back to the front desk."),
    ("instructions", "Take one tablet twice a day with food and plenty of water."),
    ("instructions", "Don't forget to lock the back door when you leave."),
    ("instructions", "Wash your hands and set the table, dinner is almost ready."),
    ("instructions", "Press the green button and wait for the beep before you speak."),
    ("instructions", "Walk straight ahead for two blocks, then cross at the bakery."),
    ("instructions", "Put the milk back in the fridge when you're done."),
    ("instructions", "Call the landlord first thing tomorrow about the broken heater."),
)


@dataclass(frozen=True)
class Clip:
    """One written clip: its WAV file's name, the text spoken, the voice (as said to espeak-ng) and its length."""
    audio: str
    reference: str
    voice: str
    task: str
    kind: str
    seconds: float
    segments: tuple = ()

    def line(self, language: str | None = None) -> dict:
        """Its clips.jsonl object."""
        item = {"audio": self.audio, "reference": self.reference, "voice": self.voice, "task": self.task,
                "kind": self.kind, "seconds": round(self.seconds, 3)}
        if language:
            item["language"] = language
        if self.segments:
            item["segments"] = [{"start": a, "end": b, "text": t} for a, b, t in self.segments]
        return item


def voice_plan(rng: np.random.Generator):
    """A held-out Voice (name, words per minute, pitch), drawn by `rng`."""
    from specdec.models.speech_synth import Voice

    return Voice(str(rng.choice(HELD_OUT_VOICES)), int(rng.choice(HELD_OUT_SPEEDS)),
                 int(rng.integers(PITCHES[0], PITCHES[1] + 1)))


def describe(voice) -> str:
    return f"{voice.name} {voice.rate} wpm pitch {voice.pitch}"


def make_clips(out: str | Path, count: int = 60, seed: int = 0, language: str | None = None, log=None) -> list:
    """Write `count` clips (2 to 8 s, 16 kHz mono 16-bit WAV) and clips.jsonl into `out`; the Clips written.
    Sentences are taken in an order drawn from `seed`, each once (past len(SENTENCES), again with other voices);
    one that falls outside 2 to 8 s with its voice is skipped."""
    from specdec.models.speech_synth import synthesize

    if count < 1:
        raise SpecdecError(f"--count {count} makes no clip", "pass --count 1 or more")
    out = _folder(out)
    rng = np.random.default_rng(seed)
    clips, tries = [], 0
    while len(clips) < count:
        if tries > 4 * count + len(SENTENCES):
            raise SpecdecError(f"only {len(clips)} of {count} sentences spoke in {MIN_S:g} to {MAX_S:g} s",
                               "ask for fewer clips")
        for index in rng.permutation(len(SENTENCES)):
            if len(clips) == count:
                break
            tries += 1
            kind, sentence = SENTENCES[int(index)]
            voice = voice_plan(rng)
            lead, tail = rng.uniform(0.1, 0.4), rng.uniform(0.1, 0.3)
            speech = synthesize(sentence, voice)
            pcm = np.concatenate([_silence(lead), speech.pcm, _silence(tail)])
            seconds = pcm.size / RATE
            if not MIN_S <= seconds <= MAX_S:
                continue
            name = f"{len(clips) + 1:04d}.wav"
            write_wav(out / name, pcm)
            clips.append(Clip(name, sentence, describe(voice), "everyday", kind, seconds))
            if log and len(clips) % 20 == 0:
                log(f"{len(clips)}/{count} clips")
    _write_jsonl(out, clips, language)
    return clips


def make_long(out: str | Path, count: int = 1, seed: int = 0, language: str | None = None, log=None) -> list:
    """Write `count` recordings of 45 to 90 s (one voice each, the sentences read one after another with 0.3 to
    0.9 s pauses) and clips.jsonl into `out`; the Clips written, each with its sentences' (start, end, text)."""
    from specdec.models.speech_synth import synthesize

    if count < 1:
        raise SpecdecError(f"--count {count} makes no recording", "pass --count 1 or more")
    out = _folder(out)
    rng = np.random.default_rng(seed)
    clips = []
    for n in range(count):
        voice = voice_plan(rng)
        target = rng.uniform(55.0, 80.0)          # stop adding sentences past this, well inside 45 .. 90 s
        parts, spans, at = [_silence(0.3)], [], int(0.3 * RATE)
        for index in rng.permutation(len(SENTENCES)):
            speech = synthesize(SENTENCES[int(index)][1], voice)
            pause = _silence(rng.uniform(0.3, 0.9))
            if (at + speech.pcm.size + pause.size) / RATE > LONG_MAX_S:
                break
            spans.append((round(at / RATE, 3), round((at + speech.pcm.size) / RATE, 3), SENTENCES[int(index)][1]))
            parts += [speech.pcm, pause]
            at += speech.pcm.size + pause.size
            if at / RATE >= target:
                break
        pcm = np.concatenate(parts)
        if pcm.size / RATE < LONG_MIN_S:          # cannot happen with SENTENCES as written (about 4 minutes)
            raise SpecdecError(f"a long recording came to {pcm.size / RATE:.1f} s, under {LONG_MIN_S:g} s",
                               "add sentences to SENTENCES")
        name = f"long-{n + 1:02d}.wav"
        write_wav(out / name, pcm)
        clips.append(Clip(name, " ".join(t for _, _, t in spans), describe(voice), "long", "long",
                          pcm.size / RATE, tuple(spans)))
        if log:
            log(f"{name}: {pcm.size / RATE:.1f} s, {len(spans)} sentences, {describe(voice)}")
    _write_jsonl(out, clips, language)
    return clips


# Recordings of real people in Debian packages, each with its transcripts, under a root where the packages are
# unpacked (dpkg-deb -x PACKAGE.deb ROOT) or installed (ROOT /): (name, the clips' folder, the transcripts' file,
# the voice and licence written into each line, the lines' "kind")
HUMAN_SOURCES = (
    ("asterisk", "usr/share/asterisk/sounds/en_US_f_Allison",
     "usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt",
     "Allison Smith (asterisk-core-sounds-en-wav, CC-BY-SA-3.0)", "telephone prompt"),
    ("librivox", "usr/share/pocketsphinx/test/data/librivox",
     "usr/share/pocketsphinx/test/data/librivox/transcription",
     "LibriVox reader, public domain (pocketsphinx-testdata, BSD-2)", "audiobook"),
)
HUMAN_PACKAGES = "asterisk-core-sounds-en-wav asterisk-core-sounds-en pocketsphinx-testdata"


def make_human(root: str | Path, out: str | Path, count: int | None = None, seed: int = 0,
               language: str | None = None, log=None) -> list:
    """Write the real recordings under `root` (HUMAN_SOURCES) that have a transcript and last 2 to 8 s, as 16 kHz
    mono WAVs (8 kHz telephone prompts resampled) with clips.jsonl (task "human") into `out`; `count`: at most that
    many, in an order drawn from `seed` (default: all). The Clips written."""
    root = Path(root)
    found = [(path, text, voice, kind) for name, folder, transcripts, voice, kind in HUMAN_SOURCES
             for path, text in _transcribed(name, root / folder, root / transcripts)]
    if not found:
        raise SpecdecError(f"no transcribed recordings under {root}",
                           f"apt-get download {HUMAN_PACKAGES}, unpack each with dpkg-deb -x PACKAGE.deb DIR and "
                           "pass --human DIR (or apt-get install them and pass --human /)")
    out = _folder(out)
    order = np.random.default_rng(seed).permutation(len(found))
    clips = []
    for index in order:
        path, text, voice, kind = found[int(index)]
        pcm = _read_pcm16(path)
        seconds = pcm.size / RATE
        if not MIN_S <= seconds <= MAX_S:
            continue
        name = f"{len(clips) + 1:04d}.wav"
        write_wav(out / name, pcm)
        clips.append(Clip(name, text, voice, "human", kind, seconds))
        if count is not None and len(clips) == count:
            break
    if not clips:
        raise SpecdecError(f"none of the {len(found)} transcribed recordings under {root} lasts {MIN_S:g} to "
                           f"{MAX_S:g} s")
    if log:
        log(f"{len(clips)} of {len(found)} transcribed recordings last {MIN_S:g} to {MAX_S:g} s")
    _write_jsonl(out, clips, language)
    return clips


def _transcribed(name: str, folder: Path, transcripts: Path) -> list:
    """(WAV path, text) of each recording of one HUMAN_SOURCES entry that is there and has a spoken transcript."""
    import gzip

    if not transcripts.is_file() and Path(f"{transcripts}.gz").is_file():
        with gzip.open(f"{transcripts}.gz", "rt", encoding="utf-8") as fh:
            text = fh.read()
    elif transcripts.is_file():
        text = transcripts.read_text(encoding="utf-8")
    else:
        return []
    pairs = []
    for line in text.splitlines():
        line = line.strip()
        if name == "asterisk":            # "agent-pass: Please enter your password followed by the pound key."
            key, sep, said = line.partition(": ")
            if line.startswith(";") or not sep or "[" in said or not said.strip():
                continue
        else:                             # "<s> he was not an ill disposed young man </s> (sense_and_..._0880)"
            if not line.startswith("<s>") or "(" not in line:
                continue
            said, key = line[3:line.rindex("</s>")], line[line.rindex("(") + 1:line.rindex(")")]
        path = folder / f"{key}.wav"
        if path.is_file():
            pairs.append((path, " ".join(said.split())))
    return pairs


def _read_pcm16(path: Path) -> np.ndarray:
    """A 16-bit PCM WAV file as 16 kHz mono float32 (another rate resampled, channels mixed)."""
    import wave

    from specdec.models.speech_synth import resample

    try:
        with wave.open(str(path)) as fh:
            if fh.getsampwidth() != 2:
                raise SpecdecError(f"{path} is not 16-bit PCM", "pass the packages' own WAV files")
            rate, channels = fh.getframerate(), fh.getnchannels()
            pcm = np.frombuffer(fh.readframes(fh.getnframes()), "<i2").astype(np.float32) / 32768.0
    except (OSError, EOFError, wave.Error) as err:
        raise SpecdecError(f"cannot read {path} ({err})", "pass the packages' own WAV files") from None
    pcm = pcm.reshape(-1, channels).mean(axis=1)
    return resample(pcm, rate, RATE)


def write_wav(path: Path, pcm: np.ndarray) -> None:
    """16 kHz mono 16-bit PCM (the standard library's wave module: no scipy needed to write)."""
    import wave

    with wave.open(str(path), "wb") as fh:
        fh.setnchannels(1)
        fh.setsampwidth(2)
        fh.setframerate(RATE)
        fh.writeframes((np.clip(pcm, -1.0, 1.0) * 32767).round().astype("<i2").tobytes())


def _silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * RATE), np.float32)


def _folder(out) -> Path:
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SpecdecError(f"cannot make the folder {out} ({err.strerror})", "pass another --out") from None
    return out


def _write_jsonl(out: Path, clips: list, language: str | None) -> None:
    with open(out / "clips.jsonl", "w", encoding="utf-8") as fh:
        for clip in clips:
            fh.write(json.dumps(clip.line(language), ensure_ascii=False) + "\n")


# --- the command line -------------------------------------------------------------------------------------------

def parser() -> OneLineParser:
    p = OneLineParser(prog="python -m specdec.bench.whisper_clips",
                      description="Held-out English speech clips (espeak-ng voices the speech pair does not train "
                                  "on) and a clips.jsonl for the benchmark's --prompts.")
    p.add_argument("--out", required=True, metavar="DIR", help="the folder to write (made if missing)")
    p.add_argument("--count", type=int, metavar="N", help="how many clips (default 60; with --human, all there are) "
                   "or, with --long, recordings (default 1)")
    p.add_argument("--seed", type=int, default=0, help="which sentences, voices and speeds (default 0)")
    p.add_argument("--long", action="store_true", help="45 to 90 s recordings of sentences read one after another")
    p.add_argument("--human", metavar="ROOT", help="instead of synthesizing, take real recordings with transcripts "
                   f"from the Debian packages {HUMAN_PACKAGES}, unpacked under ROOT (dpkg-deb -x) or installed "
                   "(ROOT /)")
    p.add_argument("--language", metavar="LANG", help="write this language into each line (e.g. en for a "
                   "multilingual model; default: none, as an English-only model takes)")
    return p


def _main(argv) -> int:
    args = parser().parse_args(argv)
    say = lambda line: print(line, file=sys.stderr, flush=True)      # noqa: E731
    if args.human and args.long:
        raise SpecdecError("--human and --long do not go together", "pass one of them")
    if args.human:
        clips = make_human(args.human, args.out, args.count, args.seed, args.language, say)
    elif args.long:
        clips = make_long(args.out, args.count or 1, args.seed, args.language, say)
    else:
        clips = make_clips(args.out, 60 if args.count is None else args.count, args.seed, args.language, say)
    seconds = [c.seconds for c in clips]
    print(f"{len(clips)} {'recording' if args.long else 'clip'}{'s' if len(clips) != 1 else ''} "
          f"({min(seconds):.1f} to {max(seconds):.1f} s, {sum(seconds):.1f} s in all) and clips.jsonl in {args.out}")
    return 0


def main(argv=None) -> int:
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
