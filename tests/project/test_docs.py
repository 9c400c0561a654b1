"""The docs in docs/ are there, and every reference to them points at a file and a heading that exist.

References are ``docs/<page>.md`` or ``docs/<page>.md#<anchor>`` anywhere in gitmem/, bench/, tests/,
examples/, README.md, the Makefile and docs/ itself, plus the relative Markdown links inside the
Markdown files. Anchors are GitHub's heading slugs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.project.test_public_api import STORE_SURFACE

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SCANNED_DIRS = ("gitmem", "bench", "tests", "examples", "docs")
SCANNED_FILES = ("README.md", "Makefile", "pyproject.toml")
TEXT_SUFFIXES = {".py", ".md", ".txt", ".toml", ".yaml", ".yml", ""}

# A docs path not inside a longer path or URL (a memory path or a gitmem:// URI holding "docs" is none).
DOC_REF = re.compile(r"(?<![\w/.:@-])docs/((?:[\w.-]+/)*[\w.-]+\.md)(#[\w-]+)?")
MD_LINK = re.compile(r"\]\(([^)\s]*)\)")

ARCHITECTURE_HEADINGS = [
    "Layers",
    "Stores and scopes",
    "Memories and paths",
    "Versions and trailers",
    "The audit ledger",
    "Redaction",
    "Retention",
    "The index and search",
    "Hooks",
    "Sessions",
    "Concurrency and durability",
    "Errors and exit codes",
    "Performance targets",
    "Python API",
]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lowercased, punctuation removed, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links keep their text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def headings(markdown: str) -> list[str]:
    """The ATX headings of a Markdown text, outside fenced code blocks."""
    out, fenced = [], False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)):
            out.append(m.group(2))
    return out


def anchors(markdown: str) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in headings(markdown):
        base = slug(heading)
        n = seen.get(base, 0)
        out.add(base if n == 0 else f"{base}-{n}")  # GitHub numbers repeated headings
        seen[base] = n + 1
    return out


def _scanned() -> Iterator[Path]:
    for name in SCANNED_FILES:
        if (ROOT / name).is_file():
            yield ROOT / name
    for top in SCANNED_DIRS:
        for path in sorted((ROOT / top).rglob("*")):
            if path.is_file() and path.suffix in TEXT_SUFFIXES and "__pycache__" not in path.parts:
                yield path


def references(path: Path, text: str) -> Iterator[tuple[int, Path, str | None]]:
    """(line, target file, anchor or None) of every docs reference and relative Markdown link."""
    for lineno, line in enumerate(text.splitlines(), 1):
        for m in DOC_REF.finditer(line):
            yield lineno, ROOT / "docs" / m.group(1), (m.group(2) or "")[1:] or None
        if path.suffix != ".md":
            continue
        for m in MD_LINK.finditer(line):
            target = m.group(1)
            if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto:, ...
                continue
            file_part, _, anchor = target.partition("#")
            yield lineno, (path.parent / file_part) if file_part else path, anchor or None


def broken(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return []
    out = []
    for lineno, target, anchor in references(path, text):
        where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{lineno}"
        if not target.exists():
            out.append(f"{where}: {target.name} does not exist")
        elif (
            anchor is not None and target.suffix == ".md" and anchor not in anchors(target.read_text("utf-8"))
        ):
            out.append(f"{where}: {target.name} has no heading #{anchor}")
    return out


def test_every_docs_reference_resolves() -> None:
    problems = [p for path in _scanned() for p in broken(path)]
    assert problems == []


def test_the_scan_sees_the_references() -> None:
    found = {
        (t.name, a)
        for path in _scanned()
        for _, t, a in references(path, path.read_bytes().decode("utf-8", "replace"))
    }
    assert ("architecture.md", "performance-targets") in found  # README, bench/, the Makefile
    assert ("architecture.md", "the-audit-ledger") in found  # docstrings in gitmem/
    assert ("security.md", "what-the-ledger-proves") in found  # a link between pages


def test_the_docs_pages_exist() -> None:
    assert {p.name for p in DOCS.glob("*.md")} >= {
        "README.md",
        "architecture.md",
        "configuration.md",
        "security.md",
        "operations.md",
    }


def test_architecture_has_the_headings_code_cites() -> None:
    found = [h for h in headings((DOCS / "architecture.md").read_text("utf-8"))]
    assert [h for h in found if h in ARCHITECTURE_HEADINGS] == ARCHITECTURE_HEADINGS


def test_the_python_api_section_names_every_store_method() -> None:
    text = (DOCS / "architecture.md").read_text("utf-8")
    section = text.split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]
    assert sorted(n for n in STORE_SURFACE if f"store.{n}" not in section) == []


def test_configuration_names_every_settings_key() -> None:
    import dataclasses

    from gitmem import config

    text = (DOCS / "configuration.md").read_text("utf-8")
    keys = [f.name for f in dataclasses.fields(config.StoreSettings)]
    keys += [f"limits.{f.name}" for f in dataclasses.fields(config.Limits)]
    keys += [f"retention.{f.name}" for f in dataclasses.fields(config.Retention)]
    keys += ["acl.write", "acl.trust_push_actor"]
    assert [k for k in keys if f"| `{k}` |" not in text] == []


# ------------------------------------------------------------------ the checker on broken references
@pytest.mark.parametrize(
    ("heading", "expected"),
    [
        ("The audit ledger", "the-audit-ledger"),
        ("Errors and exit codes", "errors-and-exit-codes"),
        ("Store settings: gitmem.yaml", "store-settings-gitmemyaml"),
        ("`acl` and `trust_push_actor`", "acl-and-trust_push_actor"),
        ("Restore from a [bundle](x.md)", "restore-from-a-bundle"),
    ],
)
def test_slugs_are_githubs(heading: str, expected: str) -> None:
    assert slug(heading) == expected


def test_the_checker_reports_missing_files_and_headings(tmp_path: Path) -> None:
    page = "docs/" + "architecture.md"  # split, so this file holds no reference of its own
    source = tmp_path / "mod.py"
    source.write_text(
        f"# see {page}#layers\n# see {page}#no-such-heading\n# see docs/" + "missing.md\n"
        "# not a reference: /kb/docs/" + "x.md, gitmem://docs/" + "y.md\n",
        encoding="utf-8",
    )
    assert [p.split(": ", 1)[1] for p in broken(source)] == [
        "architecture.md has no heading #no-such-heading",
        "missing.md does not exist",
    ]


def test_the_checker_follows_markdown_links(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Title\n\n## Repeated\n\n## Repeated\n", encoding="utf-8")
    page = tmp_path / "b.md"
    page.write_text(
        "[ok](a.md#title) [second](a.md#repeated-1) [self](#here) [web](https://example.com/#x)\n"
        "[bad](a.md#nope) [gone](c.md)\n\n## Here\n\n```\n# not a heading\n```\n",
        encoding="utf-8",
    )
    assert [p.split(": ", 1)[1] for p in broken(page)] == ["a.md has no heading #nope", "c.md does not exist"]
    assert "not-a-heading" not in anchors(page.read_text("utf-8"))


# ---------------------------------------------------------------------- docs that cannot drift
def _module_table_names() -> set[str]:
    """Every module named in the first cell of a row of docs/architecture.md's tables: "`model/guard.py`,
    `guard_rules.py`" names model/guard.py and model/guard_rules.py (a bare name takes the folder of the
    name before it in the cell)."""
    names: set[str] = set()
    for line in (ROOT / "docs" / "architecture.md").read_text().splitlines():
        if not line.startswith("| `"):
            continue
        folder = ""
        for name in re.findall(r"`([^`]+\.py)`", line.split("|")[1]):
            if "/" in name:
                folder = name.rsplit("/", 1)[0] + "/"
                names.add(name.removeprefix("gitmem/"))
            else:
                names.add(folder + name)
    return names


def test_architecture_names_every_module() -> None:
    package = ROOT / "gitmem"
    modules = {
        str(p.relative_to(package))
        for p in package.rglob("*.py")
        if p.name != "__init__.py" or p.parent == package
    }
    missing = sorted(modules - _module_table_names())
    assert not missing, f"docs/architecture.md's module table does not name: {missing}"


def test_docs_index_names_every_page() -> None:
    index = (ROOT / "docs" / "README.md").read_text()
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md") if p.name != "README.md")
    missing = [p for p in pages if f"]({p})" not in index]
    assert not missing, f"docs/README.md does not index: {missing}"


def test_every_cycle_waiver_is_named_in_the_docs() -> None:
    arch = (ROOT / "docs" / "architecture.md").read_text()
    waived = []
    for p in (ROOT / "gitmem").rglob("*.py"):
        for line in p.read_text().splitlines():
            if "# cycle-ok:" in line:
                waived.append(str(p.relative_to(ROOT / "gitmem")))
    missing = sorted({w for w in waived if f"`{w}`" not in arch and f"`engine/{Path(w).name}`" not in arch})
    assert not missing, f"docs/architecture.md does not name the cycle waivers in: {missing}"


def test_the_cli_reference_is_generated_from_the_commands() -> None:
    from gitmem.cli import reference

    expected = reference.render()
    current = (ROOT / "docs" / "cli.md").read_text()
    assert current == expected, "docs/cli.md is stale: run python -m gitmem.cli.reference > docs/cli.md"
