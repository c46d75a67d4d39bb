"""Every public name of the Python API is documented: the names `specdec.runtime` exports, and the public methods,
properties and fields of the classes users get from it (the exported classes, and the ones its methods return:
the batcher's tickets, a request's per-source figures, the object `learning()` makes).

A method or property counts as documented when it has a docstring and the API reference renders it (mkdocstrings'
`:::` directives in docs/reference/api.md give it an id of its own in the built page) or a page of the site names
it in code (`dec.estimates`, `Stats.acceptance_rate`) on a page that also names its class. A field or class
attribute has no docstring of its own: it counts when the reference renders it, when its class's docstring names it,
or when a page names it in code beside its class (the Result table of the runtime guide, the generated parameter
and statistics tables). An override of a documented method of a public base class is documented by the base's entry.
"""

from __future__ import annotations

import dataclasses
import html as html_lib
import inspect
import re
from pathlib import Path

import pytest

import specdec.runtime as runtime
from specdec.runtime.core.stats import SourceStats
from specdec.runtime.scheduling.batcher import Alone, Batcher, Ticket
from specdec.runtime.decoding.learned import Learned

ROOT = Path(__file__).resolve().parents[1]
API_PAGE = Path("reference") / "api" / "index.html"

# Classes users get from the API without importing them: what a method returns, or what a field holds.
RETURNED = {
    Batcher: "SpeculativeDecoder.batcher()",
    Ticket: "SpeculativeDecoder.submit() and Batcher.submit()",
    Alone: "SpeculativeDecoder.submit() and Batcher.submit() for a request a batch cannot run",
    SourceStats: "Stats.sources[name] and Stats.source(name)",
    Learned: "SpeculativeDecoder.learning(), passed back as generate(..., learned=...)",
}

# Public names that are not documented yet, each with what is missing. Each runs as a strict xfail: documenting
# the name turns it into an XPASS failure, and making it private fails test_known_gaps_are_public_names; either says
# to take it off this list.
KNOWN_GAPS: dict[str, str] = {}


def public_classes() -> dict[str, type]:
    """{name: class} of every exported class and every class in RETURNED."""
    found = {name: getattr(runtime, name) for name in runtime.__all__ if inspect.isclass(getattr(runtime, name))}
    found.update({cls.__name__: cls for cls in RETURNED})
    return found


def public_members(cls: type) -> dict[str, str]:
    """{name: "callable" | "attribute"} of a class's public members: what it and its bases from specdec define
    (functions, class and static methods, properties, class attributes) and its dataclass fields."""
    members: dict[str, str] = {}
    for klass in cls.__mro__:
        if klass is object or not klass.__module__.startswith("specdec"):
            continue
        for name, raw in vars(klass).items():
            if name.startswith("_") or name in members:
                continue
            callable_kind = isinstance(raw, (property, classmethod, staticmethod)) or inspect.isfunction(raw)
            members[name] = "callable" if callable_kind else "attribute"
    if dataclasses.is_dataclass(cls):
        for f in dataclasses.fields(cls):
            if not f.name.startswith("_"):
                members.setdefault(f.name, "attribute")
    return members


def docstring(cls: type, name: str) -> str:
    """A member's docstring, inherited from a base class's member when it has none of its own (as inspect finds)."""
    raw = inspect.getattr_static(cls, name, None)
    if isinstance(raw, property):
        return (raw.__doc__ or "").strip()
    if isinstance(raw, (classmethod, staticmethod)) or inspect.isfunction(raw):
        return (inspect.getdoc(getattr(cls, name)) or "").strip()
    return ""


# -- what the built site shows ------------------------------------------------------------------------------------

_CODE = re.compile(r"<code[^>]*>(.*?)</code>", re.S)
_TAGS = re.compile(r"<[^>]+>")


class Site:
    """The rendered ids of the API page and, per other page, its text and its code spans (inline and blocks)."""

    def __init__(self, api_html: str, pages: dict[str, str]):
        self.api_ids = set(re.findall(r'id="([\w.]+)"', api_html))
        self.pages = {}
        for name, page in pages.items():
            code = [html_lib.unescape(_TAGS.sub("", c)) for c in _CODE.findall(page)]
            text = html_lib.unescape(_TAGS.sub(" ", page))
            self.pages[name] = (text, code)

    @classmethod
    def built(cls, site_dir: Path) -> "Site":
        api = (site_dir / API_PAGE).read_text(encoding="utf-8")
        pages = {str(p.relative_to(site_dir)): p.read_text(encoding="utf-8") for p in sorted(site_dir.rglob("*.html"))
                 if p.relative_to(site_dir) != API_PAGE and "assets" not in p.parts and p.name != "404.html"}
        return cls(api, pages)

    def rendered(self, cls: type, name: str | None = None) -> bool:
        """The API page gives the class (or its member) an id: specdec.runtime.<...>.Class[.name]."""
        tail = cls.__name__ if name is None else f"{cls.__name__}.{name}"
        return any(i == tail or i.endswith("." + tail) for i in self.api_ids)

    def named(self, cls: type, name: str) -> list[str]:
        """The pages that name the class and show `name` in code as a member: the whole code span (`text` in a
        table of fields), after a dot (`res.stats.sources`, `dec.generate(...)`), at the start of the span
        (`max_new_tokens=64`), or as a keyword argument (`generate(prompt, gamma=2)`)."""
        n = re.escape(name)
        member = re.compile(rf"^\s*{n}\s*$|(?:^|\.){n}(?!\w)|(?<![\w.\"']){n}(?=\s*=[^=])")
        return [page for page, (text, code) in self.pages.items()
                if re.search(rf"\b{re.escape(cls.__name__)}\b", text) and any(member.search(c) for c in code)]


def undocumented(cls: type, site: Site, public: dict[str, type] | None = None) -> list[str]:
    """The public members of `cls` that are not documented (the module docstring's rule), as "Class.name: why"."""
    public = public if public is not None else {cls.__name__: cls}
    class_doc = inspect.getdoc(cls) or ""
    missing = []
    for name, kind in public_members(cls).items():
        if documented_by_base(cls, name, site, public):
            continue
        if kind == "callable":
            doc = docstring(cls, name)
            if not doc:
                missing.append(f"{cls.__name__}.{name}: no docstring")
            elif not (site.rendered(cls, name) or site.named(cls, name)):
                missing.append(f"{cls.__name__}.{name}: not in the API reference and named on no page")
        else:
            in_class_doc = site.rendered(cls) and re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", class_doc)
            if not (site.rendered(cls, name) or in_class_doc or site.named(cls, name)):
                missing.append(f"{cls.__name__}.{name}: not in the API reference, its class's docstring or a page")
    return missing


def documented_by_base(cls: type, name: str, site: Site, public: dict[str, type]) -> bool:
    """An override (or inherited member) documented where a public base class defines it."""
    for base in cls.__mro__[1:]:
        if base in public.values() and name in vars(base):
            return f"{base.__name__}.{name}" not in {m.split(":")[0] for m in undocumented(base, site, public)}
    return False


# -- the built site -----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def site(built_site) -> Site:
    return Site.built(built_site)


# -- the checks ---------------------------------------------------------------------------------------------------

def _cases() -> list:
    cases = []
    public = public_classes()
    for cls_name, cls in sorted(public.items()):
        for name in sorted(public_members(cls)):
            qualified = f"{cls_name}.{name}"
            marks = [pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[qualified])] if qualified in KNOWN_GAPS else []
            cases.append(pytest.param(cls_name, name, id=qualified, marks=marks))
    return cases


@pytest.mark.parametrize("name", runtime.__all__)
def test_every_export_is_rendered_with_a_docstring(site, name):
    obj = getattr(runtime, name)
    assert (inspect.getdoc(obj) or "").strip(), f"specdec.runtime.{name} has no docstring"
    assert f"specdec.runtime.{name}" in site.api_ids, f"docs/reference/api.md does not render specdec.runtime.{name}"


@pytest.mark.parametrize("cls_name", sorted(c.__name__ for c in RETURNED))
def test_every_returned_class_is_rendered_or_named(site, cls_name):
    cls = public_classes()[cls_name]
    assert (inspect.getdoc(cls) or "").strip(), f"{cls_name} has no docstring"
    pages = [p for p, (text, _) in site.pages.items() if re.search(rf"\b{cls_name}\b", text)]
    assert site.rendered(cls) or pages, f"{cls_name} ({RETURNED[cls]}) is neither in the API reference nor on a page"


@pytest.mark.parametrize("cls_name, name", _cases())
def test_every_public_member_is_documented(site, cls_name, name):
    public = public_classes()
    cls = public[cls_name]
    missing = [m for m in undocumented(cls, site, public) if m.split(":")[0] == f"{cls_name}.{name}"]
    assert not missing, missing[0]


def test_known_gaps_are_public_names():
    """Every KNOWN_GAPS entry is a public member still: a renamed or removed one is taken off the list."""
    public = public_classes()
    names = {f"{c}.{n}" for c, cls in public.items() for n in public_members(cls)}
    assert not sorted(set(KNOWN_GAPS) - names)


# -- the checker on planted classes -------------------------------------------------------------------------------

class Planted:
    """A class the planted site renders; it names `described` here."""

    described: int = 0
    silent: int = 0

    def documented(self):
        """Rendered in the planted API page."""

    def named_only(self):
        """Named on a planted page beside the class."""

    def undocumented(self):
        pass

    def unrendered(self):
        """Has a docstring, but no page renders or names it."""

    @property
    def quiet(self):
        return 0


class PlantedChild(Planted):
    def documented(self):           # an override of a documented method: documented by the base's entry
        return 1


PLANTED_SITE = Site(
    '<h2 id="specdec.runtime.Planted">Planted</h2><h3 id="specdec.runtime.Planted.documented">documented</h3>',
    {"guide/index.html": "<p>Call <code>Planted().named_only()</code> to see it; <code>{\"silent\": 1}</code> is a "
                         "dictionary key, not the member.</p>",
     "other/index.html": "<p>No class here: <code>x.unrendered()</code></p>"})


def test_checker_catches_planted_undocumented_members(monkeypatch):
    monkeypatch.setattr(Planted, "__module__", "specdec.planted")
    monkeypatch.setattr(PlantedChild, "__module__", "specdec.planted")
    found = undocumented(Planted, PLANTED_SITE)
    assert found == ["Planted.silent: not in the API reference, its class's docstring or a page",
                     "Planted.undocumented: no docstring",
                     "Planted.unrendered: not in the API reference and named on no page",
                     "Planted.quiet: no docstring"]
    public = {"Planted": Planted, "PlantedChild": PlantedChild}
    child = undocumented(PlantedChild, PLANTED_SITE, public)
    assert not any(m.startswith("PlantedChild.documented") for m in child), child
    assert "PlantedChild.undocumented: no docstring" in child


def test_checker_catches_a_planted_method_on_a_real_class(site, monkeypatch):
    """A public method added to SpeculativeDecoder without a page or a rendering is reported."""
    def brand_new_method(self):
        """A docstring, but neither api.md nor a page mentions it."""

    monkeypatch.setattr(runtime.SpeculativeDecoder, "brand_new_method", brand_new_method, raising=False)
    found = undocumented(runtime.SpeculativeDecoder, site, public_classes())
    assert "SpeculativeDecoder.brand_new_method: not in the API reference and named on no page" in found
