"""MkDocs hooks of the specdec site (mkdocs.yml, `hooks:`).

1. Generated tables. A span of a page from `<!-- NAME ... -->` to `<!-- end NAME -->` becomes what NAME makes
   (GENERATED): `parameters` a table of every request parameter, made from `specdec.runtime.core.params.PARAMETERS`;
   `load-options` a table of every load option, made from `specdec.runtime.core.options` (its `table()`); `stats` a
   table of every figure of a request's Stats, made from `specdec.runtime.core.stats.STATS`; `c-api` the C API
   reference: include/specdec.h's opening comment, then each section of the header with every declaration
   (function, type, constant) under its own heading, comment and code as the header has them. The declarations and
   the header are the single source, so the site cannot drift from the code. Figures come the same way from the
   dated results files (benchmarks/results/): `results FILE ...` is Current results, each named file's summary
   span (`<!-- summary HEADING -->` to `<!-- end summary -->`) under its heading, links rebased to the page;
   `expect FILE ...` README's table, a row for each `<!-- expect WHAT | FIGURES -->` line of the named files;
   `speedup` the table of Theorem 3.8's predicted speedups, computed. In the repository these spans hold the same
   text, so that the pages read as plain Markdown too (tests/test_docs.py and tests/test_docs_figures.py hold them
   current; `python docs/hooks.py` rewrites them), and the c-api span a link to the header.
2. Files outside docs/. Pages link to repository files as a reader of the Markdown in the repository sees them
   (`../benchmarks/README.md`, `../include/specdec.h`). Every such file that exists is added to the site under
   `repo/` (Markdown as a page, anything else as it is), the files those pages link to as well, and the links are
   rewritten to point there. So one link works in the repository and on the site, and `mkdocs build --strict`
   fails on a link that points nowhere.
3. The API reference. The package's subpackages live in folders named otherwise (pyproject.toml maps `runtime/`
   to `specdec.runtime`), a layout griffe (mkdocstrings' loader) does not follow through an editable install. A
   temporary tree of symlinks with the package's import layout goes first on mkdocstrings' search path.
"""

from __future__ import annotations

import importlib.util
import posixpath
import re
import shutil
import tempfile
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, InclusionLevel

REPO_PREFIX = "repo"

# An inline Markdown link or image: [text](target "title") or ![alt](target). The target stops at whitespace or ")".
_LINK = re.compile(r"(!?\[[^\]\n]*\]\()([^)\s]+)((?:\s+\"[^\"\n]*\")?\))")
_FENCE = re.compile(r"^\s*(```|~~~)")

_state = {"root": None, "docs": None, "repo_files": {}, "tree": None}


# -- 1. tables from the declarations -----------------------------------------------------------------------------

def _cell(text) -> str:
    """A table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(value) -> str:
    return f"`{value}`" if value not in (None, "") else ""


def _python_value(value) -> str:
    return f'`"{value}"`' if isinstance(value, str) else f"`{value!r}`"


def load_options_table() -> str:
    """Every load option: its keyword, default, values, meaning and the surfaces that take it."""
    from specdec.runtime.core.options import table

    return table()


def parameters_table() -> str:
    """Every request parameter: its Python keyword, default, accepted values, CLI flag, C field, Triton input."""
    from specdec.runtime.core.params import PARAMETERS

    rows = ["| keyword | default | values | flag | C field | Triton input | what it does |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for p in PARAMETERS:
        rows.append(f"| `{p.name}` | {_python_value(p.default)} | {_cell(p.values)} | {_code(p.flag)} "
                    f"| {_code(p.c_field)} | {'yes' if p.serve else 'no'} | {_cell(p.doc)} |")
    return "\n".join(rows)


_UNITS = {"count": "count", "s": "seconds", "ratio": "ratio"}


def _c_field(figure) -> str | None:
    """A figure's field in specdec_stats: its declared `c_field`, or else its own name (every declared figure is a
    field of that name in include/specdec.h; tests/test_surfaces.py holds the header to STATS)."""
    return getattr(figure, "c_field", figure.name)


def stats_tables() -> str:
    """Every declared figure of Stats: its name, unit, C field and meaning; one table per group of figures."""
    from specdec.runtime.core.stats import STATS

    groups: dict[str, list] = {}
    for figure in STATS:
        groups.setdefault(getattr(figure, "group", ""), []).append(figure)
    out = []
    for group, figures in groups.items():
        if group:
            out.append(f"Counted by kind of round (`{group}`):\n")
        out += ["| figure | unit | C field | what it counts |", "| --- | --- | --- | --- |"]
        out += [f"| `{f.name}` | {_UNITS.get(f.unit, f.unit)} | {_code(_c_field(f))} | {_cell(f.doc)} |"
                for f in figures]
        out.append("")
    return "\n".join(out).rstrip()


# -- 1b. figures from the dated results files ---------------------------------------------------------------------

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
_EXPECT = re.compile(r"<!-- expect ([^|\n]*?)\s*\|\s*(.*?)\s*-->")


def rebase(markdown: str, source_dir: Path, page_dir: Path) -> str:
    """`markdown` written in `source_dir`, its relative links made to point to the same files from `page_dir`."""
    def moved(m):
        split = _split(m.group(2))
        if split is None or not split[0]:
            return m.group(0)
        target = posixpath.normpath(posixpath.relpath((source_dir / split[0]).resolve().as_posix(),
                                                      page_dir.resolve().as_posix()))
        return m.group(1) + target + split[1] + m.group(3)
    return _LINK.sub(moved, markdown)


def results_file(stem: str) -> Path:
    path = RESULTS / f"{stem}.md"
    if not path.is_file():
        raise PluginError(f"a results span names {stem}, but {path} does not exist")
    return path


def summary(stem: str) -> tuple[str, str]:
    """(heading, text) of a results file's summary span: `<!-- summary HEADING -->`, the text, `<!-- end summary -->`."""
    found = span("summary").search(results_file(stem).read_text(encoding="utf-8"))
    if found is None:
        raise PluginError(f"benchmarks/results/{stem}.md has no <!-- summary HEADING --> ... <!-- end summary --> span")
    return found.group(2).strip(), found.group(3)


def results_entries(stems, page) -> str:
    """Current results: for each named results file its summary under its heading, links rebased to the page."""
    page_dir = (page or RESULTS.parent / "README.md").parent
    out = []
    for stem in stems:
        heading, text = summary(stem)
        out += [f"### {heading}", "", rebase(text, RESULTS, page_dir), ""]
    return "\n".join(out)


def expect_table(stems, page) -> str:
    """What to expect: a row for each `<!-- expect WHAT | FIGURES -->` line of the named results files, in order, with
    a link to the file."""
    page_dir = (page or RESULTS.parent.parent / "README.md").parent
    rows = ["| measured on | the default, as measured | date and file |", "| --- | --- | --- |"]
    for stem in stems:
        found = _EXPECT.findall(results_file(stem).read_text(encoding="utf-8"))
        if not found:
            raise PluginError(f"benchmarks/results/{stem}.md has no <!-- expect WHAT | FIGURES --> line")
        link = posixpath.relpath(results_file(stem).as_posix(), page_dir.resolve().as_posix())
        rows += [f"| {what} | {figures} | [{stem[:10]}]({link}) |" for what, figures in found]
    return "\n".join(rows)


def speedup_table(words, page) -> str:
    """The expected speedup of Theorem 3.8, (1 − α^(γ+1)) / ((1 − α)(γc + 1)), at the best γ from 1 to 8, by α and
    c: a prediction from the formula, computed here, not a measurement."""
    costs = (0.02, 0.05, 0.1, 0.2, 0.4)
    rows = ["| α | " + " | ".join(f"c = {c:g}" for c in costs) + " |", "| --- |" + " --- |" * len(costs)]
    for alpha in (0.5, 0.6, 0.7, 0.8, 0.9):
        cells = []
        for c in costs:
            # the smallest γ among equal gains (γ 1 and 2 both give 1.25× at α 0.5, c 0.2)
            gain, gamma = max((round((1 - alpha ** (g + 1)) / ((1 - alpha) * (g * c + 1)), 9), -g) for g in range(1, 9))
            cells.append(f"{gain:.2f}× (γ {-gamma})")
        rows.append(f"| {alpha:g} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


# -- 2. repository files outside docs/ ------------------------------------------------------------------------

_C_NAME = re.compile(r"typedef\s+(?:enum|struct)\s+(\w+)\s*\{|typedef\s+struct\s+\w+\s+(\w+);"
                     r"|typedef[^(;]*\(\s*\*\s*(\w+)\)|SPECDEC_API[^(;]*?(\w+)\s*\("
                     r"|static\s+inline[^(;]*?(\w+)\s*\(|#define\s+(SPECDEC_\w+)")
_C_SECTION = re.compile(r"/\* ---- (.*?) -+ \*/")


def c_api_reference(header: Path) -> str:
    """include/specdec.h as Markdown: its opening comment, then per section (`/* ---- title ---- */`) each
    declaration under a heading of its name with the comment and code above and in it; blank-line separated pieces
    that declare nothing (a struct's later fields, the closing of extern "C") join the declaration before them."""
    text = header.read_text(encoding="utf-8")
    opening = text[:text.index("*/") + 2]
    intro = "\n".join(line.removeprefix(" *").removeprefix(" ") for line in opening.splitlines()[1:-1])
    out = ["```text", intro.strip("\n"), "```"]
    items = [("## Constants", None)]             # the macros above the first section
    for chunk in re.split(r"\n\s*\n", text[len(opening):]):
        chunk = chunk.strip("\n")
        heading = _C_SECTION.match(chunk)
        if heading:
            section = re.sub(r"\s*\(.*\)$", "", heading.group(1))
            items.append((f"## {section[0].upper()}{section[1:]}", None))
            chunk = chunk[heading.end():].strip("\n")
        code = re.sub(r"/\*.*?\*/", "", chunk, flags=re.S)
        found = _C_NAME.search(code)
        name = next(g for g in found.groups() if g) if found else None
        if name and not name.startswith("_") and name not in ("SPECDEC_API", "SPECDEC_H"):
            items.append((f"### `{name}`", [chunk]))
        elif items and items[-1][1] is not None and re.search(r"[;}]", code) and not code.lstrip().startswith("#"):
            items[-1][1].append(chunk)
    for title, chunks in items:
        out += ["", title]
        if chunks:
            out += ["", "```c", "\n\n".join(chunks), "```"]
    return "\n".join(out) + "\n"


def links(markdown: str):
    """(match) for every inline link or image outside fenced code blocks and inline code."""
    fenced = False
    for line_start, line in _lines(markdown):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        code = [m.span() for m in re.finditer(r"`+[^`]*`+", line)]
        for m in _LINK.finditer(line):
            if not any(a <= m.start() < b for a, b in code):
                yield line_start, m


def _lines(markdown: str):
    start = 0
    for line in markdown.splitlines(keepends=True):
        yield start, line
        start += len(line)


def _split(target: str):
    """(path, '#fragment') of a relative link; None for URLs, absolute paths and pure fragments."""
    if not target or target.startswith(("#", "/")) or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
        return None
    path, hash_, fragment = target.partition("#")
    return path, hash_ + fragment


def _resolve(source: Path, path: str) -> Path | None:
    """The file a link from `source` names: a file, or a folder's README.md / index.md."""
    target = (source.parent / path).resolve()
    if target.is_dir():
        for name in ("README.md", "index.md"):
            if (target / name).is_file():
                return target / name
        return None
    return target if target.is_file() else None


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _collect_repo_files(pages) -> dict:
    """Every repository file outside docs/ that the docs link to, directly or through another such Markdown
    file, and those of `pages` outside docs/: real path -> its src_uri on the site."""
    root, docs = _state["root"], _state["docs"]
    found = {page: posixpath.join(REPO_PREFIX, page.relative_to(root).as_posix())
             for page in pages if not _inside(page, docs)}
    queue = list(pages)
    while queue:
        source = queue.pop()
        for _, m in links(source.read_text(encoding="utf-8")):
            split = _split(m.group(2))
            if split is None or not split[0]:
                continue
            target = _resolve(source, split[0])
            if target is None or _inside(target, docs) or not _inside(target, root) or target in found:
                continue
            found[target] = posixpath.join(REPO_PREFIX, target.relative_to(root).as_posix())
            if target.suffix == ".md":
                queue.append(target)
    return found


def _rewrite_links(markdown: str, page) -> str:
    """Links from a page to files outside docs/ (and, on pages brought in from the repository, to docs/) point to
    where those files are on the site."""
    docs, repo_files = _state["docs"], _state["repo_files"]
    source = Path(page.file.abs_src_path).resolve()
    here = posixpath.dirname(page.file.src_uri)
    from_repo = not _inside(source, docs)
    pieces, last = [], 0
    for line_start, m in links(markdown):
        split = _split(m.group(2))
        if split is None or not split[0]:
            continue
        target = _resolve(source, split[0])
        if target is None:
            continue                 # left as written: mkdocs reports a link that points nowhere
        if target in repo_files:
            uri = repo_files[target]
        elif from_repo and _inside(target, docs):
            uri = target.relative_to(docs).as_posix()
        else:
            continue
        start, end = line_start + m.start(2), line_start + m.end(2)
        pieces += [markdown[last:start], posixpath.relpath(uri, here or ".") + split[1]]
        last = end
    return "".join(pieces) + markdown[last:]


# -- 3. the package's import layout for mkdocstrings ------------------------------------------------------------

def _subpackages(root: Path) -> list:
    """The `specdec.*` subpackages pyproject.toml maps to folders of their own."""
    text = (root / "pyproject.toml").read_text(encoding="utf-8")
    try:
        import tomllib
    except ImportError:                              # Python 3.10: the table's lines are `"specdec.x" = "folder"`
        return re.findall(r'^"specdec\.(\w+)"\s*=', text, flags=re.M)
    mapping = tomllib.loads(text)["tool"]["setuptools"]["package-dir"]
    return [name.split(".", 1)[1] for name in mapping if name.startswith("specdec.")]


def _import_tree(root: Path) -> str:
    """A temporary folder holding `specdec/` with each subpackage as a symlink to its folder, as Python imports
    them (asked of the installed package, so an editable install is what is documented)."""
    tree = Path(tempfile.mkdtemp(prefix="specdec-docs-"))
    package = tree / "specdec"
    package.mkdir()
    spec = importlib.util.find_spec("specdec")
    if spec is None or not spec.submodule_search_locations:
        raise PluginError("specdec is not installed: run pip install -e \".[dev]\" before building the docs")
    top = Path(list(spec.submodule_search_locations)[0])
    for entry in top.iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name in _subpackages(root):
        sub = importlib.util.find_spec(f"specdec.{name}")
        if sub is None or not sub.submodule_search_locations:
            raise PluginError(f"specdec.{name} is not importable: reinstall with pip install -e \".[dev]\"")
        link = package / name
        if not link.exists():
            link.symlink_to(Path(list(sub.submodule_search_locations)[0]))
    return str(tree)


# -- MkDocs events ------------------------------------------------------------------------------------------------

@event_priority(100)        # before mkdocstrings' own on_config, which already creates the Python handler
def on_config(config):
    root = Path(config.config_file_path).resolve().parent
    on_shutdown()                       # `mkdocs serve` configures again for each rebuild: one tree at a time
    _state.update(root=root, docs=Path(config.docs_dir).resolve(), repo_files={})
    _state["tree"] = _import_tree(root)
    plugin = config.plugins.get("mkdocstrings")
    if plugin is not None:
        python = plugin.config.handlers.setdefault("python", {})
        python["paths"] = [_state["tree"], *python.get("paths", [])]
    return config


def _nav_entries(nav) -> list:
    """Every page path named in the nav."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [entry for value in nav.values() for entry in _nav_entries(value)]
    if isinstance(nav, list):
        return [entry for value in nav for entry in _nav_entries(value)]
    return []


def on_files(files, config):
    pages = [Path(f.abs_src_path).resolve() for f in files if f.is_documentation_page()]
    # A repository file named in the nav (repo/models/README.md) is brought in like one a page links to.
    root = _state["root"]
    for entry in _nav_entries(config.nav or []):
        if entry.startswith(REPO_PREFIX + "/"):
            real = (root / entry[len(REPO_PREFIX) + 1:]).resolve()
            if not real.is_file():
                raise PluginError(f"mkdocs.yml's nav names {entry}, but {real} does not exist")
            pages.append(real)
    _state["repo_files"] = _collect_repo_files(pages)
    for real, uri in sorted(_state["repo_files"].items(), key=lambda item: item[1]):
        # Outside the nav unless mkdocs.yml names them: no "not included in the nav" warning for each.
        files.append(File.generated(config, uri, abs_src_path=str(real), inclusion=InclusionLevel.NOT_IN_NAV))
    return files


def generated() -> dict:
    """{span name: a function of (the span's words, the page's path) making its Markdown}."""
    root = Path(__file__).resolve().parent.parent
    return {"parameters": lambda words, page: parameters_table(),
            "load-options": lambda words, page: load_options_table(),
            "stats": lambda words, page: stats_tables(),
            "c-api": lambda words, page: c_api_reference(root / "include" / "specdec.h"),
            "results": results_entries, "expect": expect_table, "speedup": speedup_table}


# the spans whose text the pages hold as generated (c-api's holds a link to the header instead)
IN_REPOSITORY = ("parameters", "load-options", "stats", "results", "expect", "speedup")


def span(name: str) -> re.Pattern:
    """A page's span NAME: its opening comment (NAME and its words), a blank line, the text, a blank line, its
    closing comment."""
    return re.compile(rf"(<!-- {re.escape(name)}\b([^\n]*?)\s*-->\n\n)(.*?)(\n\n<!-- end {re.escape(name)} -->)", re.S)


def fill(markdown: str, names=None, comments: bool = True, page: Path | None = None) -> str:
    """`markdown` with the text of each span (of `names`, default every one) made afresh; `comments=False` drops the
    span's opening and closing comments too (the site's page). `page` is where the Markdown lives (links in text
    brought from other files are made relative to it)."""
    for name, make in generated().items():
        if (names is None or name in names) and span(name).search(markdown):
            def made(m, make=make):
                text = make(m.group(2).split(), page).strip("\n")
                return m.group(1) + text + m.group(4) if comments else text
            markdown = span(name).sub(made, markdown)
    return markdown


def on_page_markdown(markdown, page, config, files):
    source = Path(page.file.abs_src_path).resolve()
    return _rewrite_links(fill(markdown, comments=False, page=source), page)


def on_shutdown():
    if _state["tree"]:
        shutil.rmtree(_state["tree"], ignore_errors=True)
        _state["tree"] = None


def pages_holding_spans(root: Path) -> list:
    """The Markdown files whose spans `python docs/hooks.py` rewrites: the site's pages, README.md and the folders'
    READMEs."""
    return [*sorted((root / "docs").rglob("*.md")), root / "README.md", root / "benchmarks" / "README.md",
            root / "models" / "README.md", root / "bindings" / "README.md"]


if __name__ == "__main__":       # python docs/hooks.py: the spans of the pages rewritten from the code and results
    for page in pages_holding_spans(Path(__file__).resolve().parent.parent):
        before = page.read_text(encoding="utf-8")
        after = fill(before, IN_REPOSITORY, page=page)
        if after != before:
            page.write_text(after, encoding="utf-8")
            print(f"rewrote {page}")
