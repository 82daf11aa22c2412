"""README.md is the front door: it opens with the two commands, links every page of docs/, and
every relative link in README.md and docs/*.md points at a file (and heading) that exists. The
stage reference in docs/recipes-and-stages.md names every registered stage and parameter."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
STAGE_REFERENCE = DOCS / "recipes-and-stages.md"

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def _prose(text: str) -> str:
    """The text outside fenced and indented code blocks, and without inline code spans."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if fenced or line.startswith("    "):
            continue
        out.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation removed, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LNM")
    return kept.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
        if fenced or not line.startswith("#"):
            continue
        slug = _slug(line.lstrip("#"))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def _links(path: Path) -> list[str]:
    return LINK.findall(_prose(path.read_text(encoding="utf-8")))


def _rel(target: Path) -> str:
    return target.relative_to(ROOT).as_posix() if target.is_relative_to(ROOT) else str(target)


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_point_at_existing_files_and_headings(page: Path) -> None:
    broken = []
    for link in _links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", link):  # http:, https:, mailto:
            continue
        file_part, _, anchor = link.partition("#")
        target = (page.parent / file_part).resolve() if file_part else page
        if not target.exists():
            broken.append(f"{link}: no file {_rel(target)}")
        elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
            broken.append(f"{link}: no heading with anchor #{anchor} in {_rel(target)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = {(ROOT / link.partition("#")[0]).resolve() for link in _links(README)}
    missing = [p.name for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked]
    assert not missing, f"README.md does not link {', '.join(missing)}: add them to its Documentation table"


def test_readme_opens_with_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    first_section = text.split("\n## ", 1)[0]
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", first_section, flags=re.S | re.M)
    assert blocks, "README.md must show the set-up commands before its first section"
    commands = [line.split("#", 1)[0].strip() for line in blocks[0].splitlines() if line.strip()]
    assert commands == ["make prepare", "make test"], f"README.md's first commands are {commands}"


def test_stage_reference_names_every_stage_and_parameter() -> None:
    from dataprep import stage as registry
    from dataprep.recipe import InputParams

    text = STAGE_REFERENCE.read_text(encoding="utf-8")
    sections = dict(re.findall(r"^#### `([^`]+)`\n(.*?)(?=^#{2,4} |\Z)", text, flags=re.S | re.M))
    common = {name for name, *_ in registry.param_fields(InputParams)}
    problems = [f"input.{name}" for name in common if f"| `{name}` |" not in text]
    for name, cls in registry.all_stages().items():
        if not cls.__module__.startswith("stages."):  # registered by a test (the worked examples)
            continue
        if name not in sections:
            problems.append(f"stage {name} (no '#### `{name}`' section)")
            continue
        for param, *_ in registry.param_fields(cls.Params):
            if cls.kind == "reader" and param in common:
                continue
            if f"| `{param}` |" not in sections[name]:
                problems.append(f"{name}.{param}")
    assert not problems, (
        f"{STAGE_REFERENCE.relative_to(ROOT)} is missing {', '.join(problems)}; "
        "`python -m dataprep stages` prints each with its type, default and help"
    )
