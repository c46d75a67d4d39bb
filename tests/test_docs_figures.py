"""The documents cannot drift from what was measured or from the commands they show.

1. Figures. A measured figure in a user document (a speedup, a time, a share, a memory size: a number with a
   decimal point or a unit) that stands beside a link to a dated results file (benchmarks/results/*.md) appears in
   that file (or another the same section links to: heading to heading). A speedup or a time with no results file beside it at all is a hand-copied figure and fails too.
   The text a docs build generates from the results files (the Current results entries, README's table) holds
   no figure its file does not, and each results file's summary and expect line quote only the file's own
   measurements.
2. Commands. Every `specdec-*` command in a fenced example parses with that command's own parser: its subcommands,
   flags and values as the installed command reads them.
The third check of the family, that no --help names a source file, is tests/test_help_texts.py.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from test_docs import ROOT, _hooks, documents
from test_help_texts import _parser, _scripts

RESULTS = ROOT / "benchmarks" / "results"
# The model card is the bundled models' own record (their training and evaluation, measured by the recipe): pages
# may quote it as they quote a results file, and it is checked as a record, not as a page.
RECORDS = (ROOT / "models" / "README.md",)

# -- 1. figures ------------------------------------------------------------------------------------------------

_LINK = re.compile(r"!?\[([^\]\n]*)\]\(([^)\s]+)(?:\s+\"[^\"\n]*\")?\)")
_COMMENT = re.compile(r"<!--.*?-->", re.S)
# 1.35, 0.73×, 1,133 ms, 42 %, 3.4 GiB; the unit decides whether a whole number is a figure
_NUMBER = re.compile(r"(?<![\w./:=~])(?<![A-Za-z_]-)(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?:\s?(×|%|ms|µs|GiB|MiB|MB|GB)(?!\w))?")
_SPEED = re.compile(r"\d×|\d\s?ms(?:/token| per| a (?:token|step|clip))")   # 1.35×, 9.7 ms a step; not "4 × it"
# what is not a measurement: dates and clock times, versions, inline code, link targets, formulas' constants
_NOT_FIGURES = (re.compile(r"\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}:\d{2}\b"), re.compile(r"`[^`\n]*`"),
                re.compile(r"\b(?:v|version\s|onnxruntime(?:-gpu)?\s|Python\s|torch\s|transformers\s)[\d.]+", re.I),
                re.compile(r"\b[\d.]+ or (?:later|newer)\b"), re.compile(r"\bthreshold\s+[\d.]+×?"),
                re.compile(r"\b\d+(?:\.\d+)?\s?[MB]-?param", re.I), re.compile(r"\b\d+(?:\.\d+)?M\b"))


def plain(text: str) -> str:
    """`text` without comments, link targets and what is not a measurement."""
    text = _LINK.sub(lambda m: " " + m.group(1) + " ", _COMMENT.sub(" ", text))
    for pattern in _NOT_FIGURES:
        text = pattern.sub(" ", text)
    return text


def numbers(text: str, everything: bool = False) -> list[tuple[float, int]]:
    """The figures of `text` as (value, decimals): numbers with a decimal point or a unit (every number with
    `everything`)."""
    text = plain(text)
    found = []
    for whole, fraction, unit in _NUMBER.findall(text):
        if everything or fraction or unit:
            found.append((float(whole.replace(",", "") + fraction), max(len(fraction) - 1, 0)))
    return found


def measured(path: Path, leave_out: re.Pattern | None = None) -> set[tuple[float, int]]:
    """Every number a results file holds (with `leave_out`, outside the spans it matches), as (value, decimals)."""
    text = path.read_text(encoding="utf-8")
    if leave_out is not None:
        text = leave_out.sub(" ", text)
    text = _LINK.sub(lambda m: " " + m.group(1) + " ", text)
    return {(float(w.replace(",", "") + f), max(len(f) - 1, 0)) for w, f, _ in _NUMBER.findall(text)}


def held(figure: tuple[float, int], record: set[tuple[float, int]]) -> bool:
    """A quoted figure is the record's when a recorded number, rounded to the quote's decimals, gives it (9.7 quotes
    9.68; 9.7 does not quote 9.6 or 10)."""
    value, decimals = figure
    return any(d >= decimals and round(v, decimals) == round(value, decimals) for v, d in record)


GENERATED = ("parameters", "load-options", "stats", "c-api", "results", "expect", "speedup")    # docs/hooks.py's spans


def _blocks(text: str):
    """(line number, section number, block) for every paragraph, list item, table row and heading outside fenced
    code, generated spans (`<!-- NAME -->` to `<!-- end NAME -->`) left out; a section is heading to heading."""
    fenced, generated, current, start, section = False, None, [], 0, 0
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        opening = re.match(r"<!-- ([\w-]+)\b[^\n]*-->$", stripped)
        if generated is None and opening and opening.group(1) in GENERATED:
            generated = opening.group(1)
        elif generated is not None:
            if stripped == f"<!-- end {generated} -->":
                generated = None
            continue
        if re.match(r"^\s*(```|~~~)", line):
            fenced = not fenced
        if fenced or re.match(r"^\s*(```|~~~)", line):
            if current:
                yield start, section, " ".join(current)
                current = []
            continue
        starts = (not stripped or stripped.startswith(("|", "#"))
                  or re.match(r"^(?:[-*]|\d+\.)\s", stripped) is not None)
        if starts and current:
            yield start, section, " ".join(current)
            current = []
        if stripped.startswith("#"):
            section += 1
        if stripped:
            if not current:
                start = number
            current.append(stripped)
            if stripped.startswith(("|", "#")):
                yield start, section, " ".join(current)
                current = []
    if current:
        yield start, section, " ".join(current)


def _results_links(page: Path, block: str) -> list[Path]:
    out = []
    for _, target in _LINK.findall(block):
        path = target.partition("#")[0]
        if path.endswith(".md") and not re.match(r"^[a-z]+:", path):
            resolved = (page.parent / path).resolve()
            if (resolved.parent == RESULTS and resolved.name != "README.md") or resolved in RECORDS:
                out.append(resolved)
    return out


def unsourced(page: Path, text: str | None = None) -> list[str]:
    """'line: what' for each figure of `page` that its results file does not hold, and each speed figure with no
    results file beside it."""
    text = page.read_text(encoding="utf-8") if text is None else text
    blocks = list(_blocks(text))
    by_section: dict[int, list[Path]] = {}
    for _, section, block in blocks:
        by_section.setdefault(section, []).extend(_results_links(page, block))
    found, records = [], {}
    for number, section, block in blocks:
        figures = numbers(block)
        if not figures:
            continue
        sources = sorted(set(by_section.get(section, [])))        # the section's links, the block's among them
        if not sources:
            if _SPEED.search(plain(block)):
                found.append(f"{number}: a speed figure with no results file beside it: {block[:100]}")
            continue
        for path in sources:
            if path not in records:
                records[path] = measured(path)
        record = set().union(*(records[p] for p in sources))
        missing = [f"{v:.{d}f}" for v, d in figures if not held((v, d), record)]
        if missing:
            names = ", ".join(p.name for p in sources)
            found.append(f"{number}: {', '.join(missing)} not in {names}: {block[:100]}")
    return found


def user_pages() -> list[Path]:
    """The Markdown users read, but the dated results themselves."""
    return [p for p in documents() if p.suffix == ".md" and "results" not in p.parts]


def figure_pages() -> list[Path]:
    """The pages whose figures quote records: the user pages but the records themselves."""
    return [p for p in user_pages() if p not in RECORDS]


@pytest.mark.parametrize("page", figure_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_figure_is_in_its_results_file(page):
    found = unsourced(page)
    assert not found, f"{page.relative_to(ROOT)}:\n" + "\n".join(found)


def _summaries() -> list[Path]:
    return sorted(p for p in RESULTS.glob("*.md") if "<!-- summary" in p.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", _summaries(), ids=lambda p: p.name)
def test_a_summary_quotes_its_own_file(path):
    """A results file's summary (what Current results shows) and its expect line (README's table) hold only figures
    that the file's record holds outside them, or another results file the summary links to."""
    hooks = _hooks()
    text = path.read_text(encoding="utf-8")
    heading, summary = hooks.summary(path.stem)
    record = measured(path, leave_out=re.compile(hooks.span("summary").pattern + "|" + hooks._EXPECT.pattern, re.S))
    for other in _results_links(path, summary):
        if other != path:
            record |= measured(other)
    quoted = numbers(heading + " " + summary)
    for what, figures in hooks._EXPECT.findall(text):
        quoted += numbers(what + " " + figures)
    missing = sorted({f"{v:.{d}f}" for v, d in quoted if not held((v, d), record)})
    assert not missing, f"{path.name}: the summary or expect line quotes {missing}, which its record does not hold"


@pytest.mark.parametrize("name", ["results", "expect"])
def test_the_generated_figures_are_current(name):
    """Current results (benchmarks/README.md) and README's table hold what the docs build makes from the results
    files (`python docs/hooks.py` rewrites them)."""
    hooks = _hooks()
    pages = [p for p in hooks.pages_holding_spans(ROOT) if hooks.span(name).search(p.read_text("utf-8"))]
    assert pages, f"no page holds the {name} span"
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert hooks.fill(text, [name], page=page) == text, f"{page}: stale {name}; run python docs/hooks.py"


def test_a_changed_figure_is_caught():
    """The check catches a figure changed by hand beside its link, in a paragraph and in a table's section."""
    page = ROOT / "docs" / "guides" / "planted.md"
    link = "[2026-12-07](../../benchmarks/results/2026-12-07-whisper-real-models.md)"
    good = f"# T\n\nThe default took 0.73× faster-whisper's time per clip ({link}).\n"
    assert unsourced(page, good) == []
    assert unsourced(page, good.replace("0.73×", "0.61×")) != []
    table = f"# T\n\nMeasured: {link}.\n\n| a | b |\n| --- | --- |\n| fp32 | 828 ms |\n"
    assert unsourced(page, table) == [] and unsourced(page, table.replace("828", "821")) != []
    assert unsourced(page, "# T\n\nThe default gives 1.40× on a CPU.\n") != []      # no results file beside it


def test_a_summary_figure_the_record_lacks_is_caught(tmp_path):
    hooks = _hooks()
    text = (RESULTS / "2026-12-07-whisper-real-models.md").read_text(encoding="utf-8")
    heading, summary = hooks.summary("2026-12-07-whisper-real-models")
    record = measured(RESULTS / "2026-12-07-whisper-real-models.md",
                      leave_out=re.compile(hooks.span("summary").pattern, re.S))
    assert all(held(f, record) for f in numbers(summary))
    assert not held((0.61, 2), record)
    assert not all(held(f, record) for f in numbers(summary.replace("0.73×", "0.61×")))
    assert "<!-- expect" in text


# -- 2. example commands -----------------------------------------------------------------------------------------

SCRIPTS = _scripts()         # the package's console scripts -> the modules holding their parsers


def example_commands(text: str) -> list[tuple[int, list[str]]]:
    """(line number, argv) for every specdec-* command in the fenced blocks of `text`: continuation lines joined,
    a shell prompt, comments, variable assignments, redirections and `...` left out, one command per part of a
    pipeline or an && / ; list."""
    found, fenced, pending = [], False, None
    for number, line in enumerate(text.splitlines(), 1):
        if re.match(r"^\s*(```|~~~)", line):
            fenced, pending = not fenced, None
            continue
        if not fenced:
            continue
        stripped = line.strip()
        if pending is None:
            pending = [number, re.sub(r"^\$\s+", "", stripped)]
        else:
            pending[1] += " " + stripped
        if pending[1].endswith("\\"):
            pending[1] = pending[1][:-1]
            continue
        start, command = pending
        pending = None
        for part in re.split(r"\s(?:&&|\|\||;|\|)\s|;$", command):
            part = re.sub(r"\s\d?>>?\s*\S+|\s<\s*\S+", " ", part)
            try:
                argv = shlex.split(part, comments=True)
            except ValueError:
                continue
            while argv and re.match(r"^[A-Za-z_]\w*=", argv[0]):
                argv = argv[1:]
            if argv and argv[0].rsplit("/", 1)[-1] in SCRIPTS:
                found.append((start, [argv[0].rsplit("/", 1)[-1]] + [a for a in argv[1:] if a != "..."]))
    return found


def parse_error(argv: list[str]) -> str | None:
    """What the command's own parser says about `argv`, or None when it parses."""
    parser = _parser(SCRIPTS[argv[0]])
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(argv[1:])
    except SystemExit as e:
        return None if not e.code else (err.getvalue().strip().splitlines() or [f"exit {e.code}"])[-1]
    except Exception as e:          # the one-line parsers raise their error
        return f"{type(e).__name__}: {e}"
    return None


@pytest.mark.parametrize("page", user_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_example_commands_parse(page):
    bad = [f"{page.relative_to(ROOT)}:{n}: {' '.join(argv)[:120]}\n    {error}"
           for n, argv in example_commands(page.read_text(encoding="utf-8")) if (error := parse_error(argv))]
    assert not bad, "\n".join(bad)


def test_the_examples_are_found():
    readme = example_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    assert any(argv[0] == "specdec-export" for _, argv in readme)
    assert any(argv[0] == "specdec-generate" for _, argv in readme)


def test_a_bad_flag_in_an_example_is_caught():
    text = ("```bash\n$ specdec-bench drafts --export DIR --prompts P.jsonl \\\n    --draft none auto --repeat 3\n"
            "specdec-export --target t5-large --draft t5-small --export out && specdec-generate --export out"
            " 'translate: hi' > out.txt\n```\n")
    commands = example_commands(text)
    assert [argv[:2] for _, argv in commands] == [["specdec-bench", "drafts"], ["specdec-export", "--target"],
                                                 ["specdec-generate", "--export"]]
    assert all(parse_error(argv) is None for _, argv in commands)
    assert parse_error(example_commands(text.replace("--repeat 3", "--repeats 3"))[0][1])
    assert parse_error(example_commands(text.replace("drafts", "--drafts"))[0][1])
    assert parse_error(["specdec-bench", "--shapes", "t5-large:t5-small"])
    assert parse_error(["specdec-bench", "shapes", "t5-large:t5-small"]) is None
    add = ["specdec-datastore", "add", "store.sdds", "--export", "DIR", "notes.txt"]
    assert parse_error(add) is None and parse_error([*add, "--force"])         # --force is build's alone
