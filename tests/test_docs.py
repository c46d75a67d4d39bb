"""The user documentation: the MkDocs site builds with --strict, README.md stays a short guide whose links resolve,
and no document names the project's internal work items."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 160
INSTALL_BY_LINE = 40


def documents() -> list[Path]:
    """Every document a user reads: README.md, the site's sources, the folders' READMEs and the benchmark results."""
    found = [ROOT / "README.md", ROOT / "models" / "README.md", ROOT / "bindings" / "README.md",
             ROOT / "benchmarks" / "README.md", ROOT / "mkdocs.yml"]
    found += sorted(p for p in (ROOT / "docs").rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    found += sorted((ROOT / "benchmarks" / "results").rglob("*.md"))
    return [p for p in found if p.is_file()]


# -- internal work items -------------------------------------------------------------------------------------------

WORK_ITEMS = (
    (re.compile(r"\bissues?\s*#?\d+", re.I), "an issue number"),
    (re.compile(r"\bwork\s+items?\b", re.I), "a work item"),
    # "round" is mostly the speculative round: "each round", "16 rounds", "a round of Algorithm 1", and a bench's
    # repeat ("3 rounds (interleaved)", "per round 0.061-0.069"). As a project phase it is "round" followed by a
    # whole number ("round 2", "in round 1:"), never "per round <figure>" and never a decimal ("round 0.06").
    (re.compile(r"(?<![Pp]er )\b[Rr]ound\s+\d+(?![\d.])"), "a project round"),
    # "session" is also the C API's specdec_session and ONNX Runtime's InferenceSession, so only a session of
    # work is matched: named as work, or by its place in a sequence of them, or by its number.
    (re.compile(r"\b(?:work(?:ing)?|previous|last|earlier|prior|next)\s+session\b", re.I), "a work session"),
    (re.compile(r"\bsession\s+#?\d+\b", re.I), "a numbered session"),
    (re.compile(r"\bgoals?\s+(?:(?:was|were|is|are)\s+)?(?:not\s+)?(?:met|missed|reached)\b", re.I),
     "a goal met or missed"),
    (re.compile(r"\btargets?\s+(?:(?:was|were|is|are)\s+)?(?:not\s+)?(?:met|missed)\b", re.I),
     "a target met or missed"),
    (re.compile(r"\b(?:met|missed|reached|misses|meets)\s+(?:the\s+|its\s+|our\s+)?goals?\b", re.I),
     "a goal met or missed"),
    # a goal quoted beside a number: "(goal 1.5×)", "goal ≥ 0.97×", "the 0.6 goal", "the 90 % goal"
    (re.compile(r"\bgoals?\s*(?:[≥≤<>=]|\d)|\d\s*%?\s+goals?\b", re.I), "a goal beside a figure"),
    (re.compile(r"\bthe\s+(?:last|previous)\s+note\b", re.I), "a reference to an internal note"),
)


def work_items(text: str) -> list[tuple[int, str, str]]:
    """(line number, matched text, what it is) for every reference to an internal work item in `text`."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for pattern, what in WORK_ITEMS:
            found += [(number, m.group(0), what) for m in pattern.finditer(line)]
    return found


@pytest.mark.parametrize("text", [
    "This was fixed in issue 27.",
    "see issue #12 for details",
    "Measured in round 2 of the project.",
    "round 1: the first export",
    "as the previous session found",
    "in the last session",
    "this is a work item",
    "goal met: 1.5x",
    "the goals were missed on translate",
    "target missed",
    "it missed the goal",
    "1.15x on summarize (goal 1.5x)",
    "auto 0.99x (goal ≥ 0.97×)",
    "just under the 0.6 goal",
    "session 3 measured it",
    "as the last note said",
])
def test_checker_finds_a_planted_work_item(text):
    assert work_items(text), f"not caught: {text!r}"


@pytest.mark.parametrize("text", [
    "Each round the runtime picks the source; a source not chosen for 100 rounds is tried once.",
    "4 random prompts, 3 rounds (interleaved); per round 0.061-0.069.",
    "A round of Algorithm 1 makes 2 ONNX Runtime runs.",
    "specdec_session *s = NULL; one session may be shared by threads; a session stays usable.",
    "ONNX Runtime sessions are created once; the second session holds its own weights.",
    "The target model verifies the guesses; the target's step costs 58 ms.",
    "The issue with fp16 is overflow in the FFN output.",
    "the goal of speculative decoding is lower latency",
])
def test_checker_leaves_ordinary_text_alone(text):
    assert work_items(text) == []


@pytest.mark.parametrize("path", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_document_names_internal_work_items(path):
    found = work_items(path.read_text(encoding="utf-8"))
    assert not found, "\n".join(f"{path.relative_to(ROOT)}:{n}: {text!r} ({what})" for n, text, what in found)


# -- README.md ----------------------------------------------------------------------------------------------------

def test_readme_is_a_short_guide():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move details into docs/"
    install = next(n for n, line in enumerate(lines, 1) if line.startswith("## Install"))
    assert install <= INSTALL_BY_LINE, f"README.md's Install starts at line {install}; a reader meets it by line 40"


_LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"\n]*\")?\)")


def relative_links(text: str) -> list[str]:
    """The relative targets of inline Markdown links outside fenced code blocks and inline code."""
    out, fenced = [], False
    for line in text.splitlines():
        if re.match(r"^\s*(```|~~~)", line):
            fenced = not fenced
            continue
        if fenced:
            continue
        line = re.sub(r"`+[^`]*`+", "", line)
        for m in _LINK.finditer(line):
            target = m.group(1)
            if not target.startswith(("#", "/")) and not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                out.append(target)
    return out


def test_link_finder_on_a_planted_text():
    text = ("[a](docs/x.md) ![b](img.png \"t\") [c](https://example.org) [d](#anchor) `[e](code.md)`\n"
            "```\n[f](in-fence.md)\n```\n[g](../up.md#part)")
    assert relative_links(text) == ["docs/x.md", "img.png", "../up.md#part"]


@pytest.mark.parametrize("name", ["README.md", "models/README.md", "bindings/README.md"])
def test_relative_links_point_to_files_that_exist(name):
    source = ROOT / name
    missing = [target for target in relative_links(source.read_text(encoding="utf-8"))
               if not (source.parent / target.partition("#")[0]).exists()]
    assert not missing, f"{name} links to missing files: {missing}"


def test_docs_pages_link_to_files_that_exist():
    """The same check for docs/ without MkDocs (its --strict build checks them too, and anchors)."""
    missing = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        missing += [f"{page.relative_to(ROOT)} -> {t}" for t in relative_links(page.read_text(encoding="utf-8"))
                    if not (page.parent / t.partition("#")[0]).exists()]
    assert not missing, "\n".join(missing)


# -- the MkDocs site ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def site(built_site):
    return built_site


def _text(html_file: Path) -> str:
    html = html_file.read_text(encoding="utf-8")
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_site_builds_with_strict(site):
    assert (site / "index.html").is_file()


def test_parameter_table_is_generated_from_the_declarations(site):
    from specdec.runtime.core.params import PARAMETERS

    text = _text(site / "reference" / "parameters" / "index.html")
    html = (site / "reference" / "parameters" / "index.html").read_text()
    assert "<!-- parameters" not in html and "<!-- end parameters" not in html
    for declared in PARAMETERS:
        assert declared.flag in text and declared.name in text, declared.name
        assert " ".join(declared.doc.split())[:40] in text.replace("&gt;", ">").replace("&#39;", "'"), declared.name


def test_stats_table_is_generated_from_the_declarations(site):
    from specdec.runtime.core.stats import STATS

    text = _text(site / "reference" / "stats" / "index.html")
    for figure in STATS:
        assert figure.name in text, figure.name


def _hooks():
    spec = importlib.util.spec_from_file_location("specdec_docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["parameters", "load-options", "stats", "speedup"])
def test_the_pages_hold_the_tables_the_code_makes(name):
    """Read as plain Markdown (in the repository, on a forge), a page shows the table its span holds; that table is
    what the site generates from the code (`python docs/hooks.py` rewrites a stale one)."""
    hooks = _hooks()
    pages = [p for p in sorted((ROOT / "docs").rglob("*.md")) if hooks.span(name).search(p.read_text("utf-8"))]
    assert len(pages) == 1, (name, pages)
    text = pages[0].read_text(encoding="utf-8")
    assert hooks.fill(text, [name]) == text, f"{pages[0]}: the {name} table is stale; run python docs/hooks.py"
    assert "| --- |" in hooks.span(name).search(text).group(3)


def test_a_stale_table_is_caught():
    hooks = _hooks()
    page = (ROOT / "docs" / "reference" / "parameters.md").read_text(encoding="utf-8")
    stale = page.replace("| `top_k` |", "| `top_k_old` |")
    assert stale != page and hooks.fill(stale, ["parameters"]) == page


def test_c_api_reference_is_generated_from_the_header(site):
    """Every function, type and constant include/specdec.h declares has a heading of its own on the C API page (its
    id in the page's table of contents), and the page holds the header's comments."""
    code = re.sub(r"/\*.*?\*/", "", (ROOT / "include" / "specdec.h").read_text(encoding="utf-8"), flags=re.S)
    declared = set(re.findall(r"^SPECDEC_API\s[^(;]*?(\w+)\s*\(", code, re.M)) | set(re.findall(
        r"^typedef\s+(?:enum|struct)\s+(\w+)\s*\{", code, re.M)) | set(re.findall(
        r"^static\s+inline[^(;]*?(\w+)\s*\(", code, re.M))
    constants = set(re.findall(r"^#define\s+(SPECDEC_\w+)\s+\S", code, re.M)) - {"SPECDEC_API", "SPECDEC_H"}
    assert {"specdec_open", "specdec_params", "specdec_params_default"} <= declared and "SPECDEC_ERROR_MAX" in constants
    html = (site / "reference" / "c-api" / "index.html").read_text(encoding="utf-8")
    text = _text(site / "reference" / "c-api" / "index.html")
    assert "<!-- c-api" not in html and "<!-- end c-api" not in html and "holds no more" not in text
    missing = [name for name in sorted(declared) if f'id="{name.lower()}"' not in html]
    missing += [name for name in sorted(constants) if name not in text]
    assert not missing, missing
    assert "The calling thread's last error" in text


def test_api_reference_is_generated_from_docstrings(site):
    """Every name `specdec.runtime` exports is documented under its public import path, with a docstring, and so is
    every public method of SpeculativeDecoder a user calls."""
    import specdec.runtime as runtime

    html = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    text = _text(site / "reference" / "api" / "index.html")
    missing = [name for name in runtime.__all__ if f'id="specdec.runtime.{name}"' not in html]
    missing += [f"SpeculativeDecoder.{name}" for name in ("load", "generate", "stream", "generate_batch",
                                                          "stream_batch", "batcher", "decode", "reset_estimates")
                if f'id="specdec.runtime.SpeculativeDecoder.{name}"' not in html]
    assert not missing, missing
    assert not [name for name in runtime.__all__ if not (getattr(runtime, name).__doc__ or "").strip()]
    assert "Open an export directory" in text           # SpeculativeDecoder.load's docstring


def test_repository_pages_are_in_the_site(site):
    """models/README.md and bindings/README.md (in the nav) and benchmarks/README.md (linked) become pages."""
    for page in ("repo/models/index.html", "repo/bindings/index.html", "repo/benchmarks/index.html"):
        assert (site / page).is_file(), page


def test_api_reference_shows_no_declaration_internals(site):
    """Params' fields are declared with check functions; the reference shows no `lambda` of them (the parameter
    table documents each field)."""
    assert "lambda" not in _text(site / "reference" / "api" / "index.html")


SOURCE_FILE = re.compile(r"(?<![\w/.-])(?:export|runtime|serve|bindings|benchmarks|models)/(?!examples/)[\w/]*\.(?:py|c)\b")


def test_docs_name_no_source_file():
    """Users read the documents, not the modules: no user document (dated results excepted) sends them to a source
    file of the package (a test file may be cited as evidence; the C examples are programs users build)."""
    found = [f"{path.relative_to(ROOT)}:{number}: {match}" for path in documents() if "results" not in path.parts
             for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
             for match in SOURCE_FILE.findall(line)]
    assert not found, "\n".join(found)


def test_the_source_file_check_catches_a_planted_path():
    assert SOURCE_FILE.findall("see runtime/decoding/sources/auto.py, tests/runtime/decoding/test_auto.py and bindings/examples/"
                               "example.c") == ["runtime/decoding/sources/auto.py"]


# -- what has run where: one page says it -----------------------------------------------------------------------

MATRIX = ROOT / "docs" / "explanation" / "support-matrix.md"

# A provider or device named in the same sentence (or table row) as a statement of whether it ran, was measured or
# was available. Only the support matrix says that; every other page links to it.
PROVIDER = re.compile(r"\b(?:GPUs?|CUDA|TensorRT|Jetson|H200|onnxruntime-gpu)\b", re.I)
RUN_STATUS = (
    # "has not been run", "was never measured", "have not run", "is untested"
    re.compile(r"\b(?:has|have|had|was|were|is|are|been)\s+(?:not|never)\s+(?:yet\s+)?(?:been\s+)?"
               r"(?:run|ran|measured|tested|timed|tried|checked)\b", re.I),
    # "was not available" (but "is not available in this onnxruntime" speaks of the reader's install)
    re.compile(r"\b(?:was|were|has\s+been|have\s+been)\s+(?:not|never)\s+available\b", re.I),
    re.compile(r"\bnever\s+(?:been\s+)?(?:run|ran|measured|tested|timed|tried)\b", re.I),
    re.compile(r"\bnot\s+(?:yet\s+)?(?:run|measured|tested|timed)\b", re.I),
    re.compile(r"\bun(?:run|tested|measured|timed)\b", re.I),
    # "no GPU was available", "no Jetson board (and no GPU) was available", "No GPU numbers exist"
    re.compile(r"\bno\s+(?:\w+\s+){0,3}(?:was|were|is)\s+available\b", re.I),
    # "no GPU has been measured", "no TensorRT run was recorded"
    re.compile(r"\bno\s+(?:GPU|CUDA|TensorRT|Jetson)\b[^.;:]*?\b(?:has|have|was|were)\s+(?:yet\s+)?(?:been\s+)?"
               r"(?:run|measured|tested|timed|recorded|available)\b", re.I),
    re.compile(r"\bno\s+(?:GPU|CUDA|TensorRT|Jetson)\s+(?:\w+\s+)?(?:numbers|figures|results|measurements?|runs?)\b",
               re.I),
    # "ran once", "has run once, by hand", "run twice"
    re.compile(r"\b(?:ran|run|runs)\s+(?:once|twice|by\s+hand)\b", re.I),
    re.compile(r"\bnothing\b[^.]*\bhas\s+been\s+run\b", re.I),
)
# a link to the matrix is how other pages speak of it: its text is not a statement
_MATRIX_LINK = re.compile(r"\[[^\]\n]*\]\([^)\s]*support-matrix\.md[^)\s]*\)")


# a sentence ends at . ! or ? before a space and a capital letter, a link or markup (not inside "1.31.1" or "e.g. a")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\[(`*_\"'])")


def _sentences(text: str):
    """(line number, sentence) for the prose and table rows of a Markdown text, fenced code left out: a paragraph's
    wrapped lines are joined, then cut at sentence ends; a table row is one sentence."""
    lines, fenced, paragraph = text.splitlines(), False, []

    def flush():
        if paragraph:
            joined = " ".join(line.strip() for _, line in paragraph)
            starts, offset = [], 0
            for number, line in paragraph:
                starts.append((offset, number))
                offset += len(line.strip()) + 1
            begin = 0
            for end in [m.start() for m in _SENTENCE_END.finditer(joined)] + [len(joined)]:
                sentence = joined[begin:end].strip()
                if sentence:
                    first = begin + len(joined[begin:end]) - len(joined[begin:end].lstrip())
                    yield max(n for o, n in starts if o <= first), sentence
                begin = end
            paragraph.clear()

    for number, line in enumerate(lines, 1):
        if re.match(r"^\s*(```|~~~)", line):
            fenced = not fenced
            yield from flush()
            continue
        if fenced:
            continue
        if not line.strip() or line.lstrip().startswith(("|", "#")) or re.match(r"^\s*(?:[-*]|\d+\.)\s", line):
            yield from flush()
            if line.lstrip().startswith(("|", "#")):
                yield number, line.strip()
                continue
            if not line.strip():
                continue
        paragraph.append((number, line))
    yield from flush()


def run_status_statements(text: str) -> list[tuple[int, str]]:
    """(line number, sentence) for every sentence that says whether a GPU provider or device ran, was measured or was
    available, links to the support matrix left out."""
    found = []
    for number, sentence in _sentences(text):
        plain = _MATRIX_LINK.sub(" ", sentence)
        if PROVIDER.search(plain) and any(p.search(plain) for p in RUN_STATUS):
            found.append((number, sentence))
    return found


def run_status_pages() -> list[Path]:
    """The pages users read, but the support matrix and the dated results (the records the matrix cites)."""
    return [p for p in documents() if p.suffix == ".md" and p != MATRIX and "results" not in p.parts]


@pytest.mark.parametrize("text", [
    "Everything was built on CPUs; no GPU has been measured.",
    "No GPU numbers exist: the CUDA and TensorRT\nproviders have not been measured.",
    "That path **has not\nbeen run** on a GPU provider (no GPU was available); the CPU path is the measured one.",
    "Nothing on this page has been run: no Jetson board (and no GPU) was available.",
    "| the runtime with CUDA or TensorRT (`provider=\"cuda\"`) | not run anywhere |",
    "The CUDA provider ran once, on an NVIDIA H200 with onnxruntime-gpu 1.31.1.",
    "CUDA has run once, by hand, on an NVIDIA H200; TensorRT has never run.",
    "Graphs CUDA can capture are written and tested on the CPU provider but have not run on a GPU yet.",
    "The TensorRT provider is untested.",
    "TensorRT was not available on that machine.",
    "Speed of a real pair is unmeasured; and no GPU.",
    "TensorRT has not been run ([support matrix](../explanation/support-matrix.md)).",
])
def test_the_run_status_checker_finds_a_planted_statement(text):
    assert run_status_statements(text), f"not caught: {text!r}"


@pytest.mark.parametrize("text", [
    "What has run on a GPU, TensorRT and Jetson: the [support matrix](docs/explanation/support-matrix.md).",
    "[What has been run, on which provider](../explanation/support-matrix.md): CPU, CUDA, TensorRT, Jetson.",
    "Install onnxruntime-gpu for `cuda` / `tensorrt`, or use `provider=\"cpu\"`.",
    "`provider=\"auto\"` takes CUDA when onnxruntime offers it, else the CPU.",
    "On a GPU the capturable graphs replay one CUDA graph per width.",
    "| `provider 'tensorrt' is not available in this onnxruntime` | install onnxruntime-gpu |",
    "The draft model has not been run on this prompt yet.",
    "```\nspecdec-bench gpu --provider cuda   # no GPU was available\n```",
])
def test_the_run_status_checker_leaves_links_and_other_text_alone(text):
    assert run_status_statements(text) == []


def test_the_sentences_keep_their_line_numbers():
    text = "# Title\n\nFirst sentence.\nSecond one runs\nover two lines. Third.\n\n| a | b |\n"
    assert list(_sentences(text)) == [(1, "# Title"), (3, "First sentence."), (4, "Second one runs over two lines."),
                                      (5, "Third."), (7, "| a | b |")]


@pytest.mark.parametrize("path", run_status_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_only_the_support_matrix_states_what_ran_on_which_provider(path):
    """No page but the support matrix says whether a GPU provider or device ran, was measured or was available: the
    same fact restated in many pages went stale. Link to docs/explanation/support-matrix.md instead."""
    found = run_status_statements(path.read_text(encoding="utf-8"))
    assert not found, "\n".join(f"{path.relative_to(ROOT)}:{n}: {s[:200]}" for n, s in found)
