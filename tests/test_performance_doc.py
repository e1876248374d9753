"""docs/performance.md against the bench results it quotes.

Every results file is cited and every cited one exists; a section that links a run names
it as the file's header does; and every figure of a table row judged "met" or "not met"
is in a file that its section cites, directly or through a section it links to. A figure
worked out from others belongs in the prose, with its arithmetic, not in a judged row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "performance.md"
RESULTS = REPO / "bench" / "results"

RESULT_LINK = re.compile(r"\]\(\.\./bench/results/([^)]+)\)")
ANCHOR_LINK = re.compile(r"\]\(#([^)]+)\)")
MARKDOWN_LINK = re.compile(r"\[[^\]]*\]\([^)]*\)")
CODE_SPAN = re.compile(r"`[^`]*`")
# A figure as the doc writes it: not part of a name such as p50, L4 or v1147.
FIGURE = re.compile(r"(?<![\w.])\d+(?:,\d{3})*(?:\.\d+)?(?!\w)")
THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
VERDICTS = frozenset({"met", "not met"})


@dataclass
class Section:
    title: str
    anchor: str
    lines: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def results(self) -> list[str]:
        return RESULT_LINK.findall(self.text)

    def anchors(self) -> list[str]:
        return ANCHOR_LINK.findall(self.text)


def slug(title: str) -> str:
    """The anchor GitHub gives a heading."""
    kept = re.sub(r"[^\w\- ]", "", title.strip().lower())
    return kept.replace(" ", "-")


def sections(text: str) -> list[Section]:
    found: list[Section] = []
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        heading = re.match(r"#{1,6} (.+)", line) if not fenced else None
        if heading:
            found.append(Section(heading[1], slug(heading[1])))
        elif found:
            found[-1].lines.append(line)
    return found


def without_thousands(text: str) -> str:
    return THOUSANDS.sub("", text)


def in_text(figure: str, text: str) -> bool:
    return re.search(rf"(?<![\d.]){re.escape(figure)}(?!\d|\.\d)", text) is not None


def cited(section: Section, by_anchor: dict[str, Section]) -> set[str]:
    """The results files a section links, and those of the sections it links to."""
    names = set(section.results())
    for anchor in section.anchors():
        names.update(by_anchor[anchor].results())
    # A missing one is reported by test_cited_results_file_exists.
    return {name for name in names if (RESULTS / name).is_file()}


def judged_rows(section: Section) -> list[list[str]]:
    rows: list[list[str]] = []
    for line in section.lines:
        if not line.startswith("|"):
            continue
        cells = [cell.strip().strip("*").strip() for cell in line.strip().strip("|").split("|")]
        if any(cell in VERDICTS for cell in cells):
            rows.append(cells)
    return rows


def row_figures(cells: list[str]) -> list[str]:
    """The figures of a judged row: not its name, its target or its verdict."""
    figures: list[str] = []
    for cell in cells[1:]:
        if cell in VERDICTS or "≤" in cell or "≥" in cell:
            continue
        plain = CODE_SPAN.sub("", MARKDOWN_LINK.sub("", cell)).replace("**", "")
        figures.extend(without_thousands(found) for found in FIGURE.findall(plain))
    return figures


def header(name: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in (RESULTS / name).read_text().splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(": ")
        fields[key] = value
    return fields


DOC_SECTIONS = sections(DOC.read_text())
BY_ANCHOR = {section.anchor: section for section in DOC_SECTIONS}
LINKED = sorted({name for section in DOC_SECTIONS for name in section.results()})
LINKING = [(section, name) for section in DOC_SECTIONS for name in dict.fromkeys(section.results())]
JUDGED = [(section, cells) for section in DOC_SECTIONS for cells in judged_rows(section)]


def test_every_results_file_is_cited() -> None:
    on_disk = sorted(path.name for path in RESULTS.glob("*.txt"))
    assert [name for name in on_disk if name not in LINKED] == []


@pytest.mark.parametrize("name", LINKED)
def test_cited_results_file_exists(name: str) -> None:
    assert (RESULTS / name).is_file(), f"docs/performance.md cites a missing {name}"


def test_every_anchor_names_a_section() -> None:
    missing = {
        (section.title, anchor)
        for section in DOC_SECTIONS
        for anchor in section.anchors()
        if anchor not in BY_ANCHOR
    }
    assert missing == set()


@pytest.mark.parametrize(("section", "name"), LINKING, ids=[f"{s.anchor}:{n}" for s, n in LINKING])
def test_section_names_its_runs(section: Section, name: str) -> None:
    fields = header(name)
    # Outside the links, whose file names hold the commit and date anyway.
    prose = MARKDOWN_LINK.sub("", section.text)
    for wanted in (
        f"`{fields['commit']}`",
        fields["date"].split()[0],
        f"niceness {fields['niceness']}",
        fields["machine"],
    ):
        assert wanted in prose, f"{section.title!r} does not name {wanted!r} of {name}"


def test_there_are_judged_rows() -> None:
    assert len(JUDGED) >= 20


@pytest.mark.parametrize(
    ("section", "cells"), JUDGED, ids=[f"{s.anchor}:{c[0][:40]}" for s, c in JUDGED]
)
def test_judged_row_quotes_its_files(section: Section, cells: list[str]) -> None:
    names = cited(section, BY_ANCHOR)
    assert names, f"{section.title!r} judges {cells[0]!r} but cites no results file"
    files = [without_thousands((RESULTS / name).read_text()) for name in sorted(names)]
    figures = row_figures(cells)
    assert figures, f"{cells[0]!r} is judged on no figure"
    unquoted = [figure for figure in figures if not any(in_text(figure, f) for f in files)]
    assert unquoted == [], f"{cells[0]!r}: {unquoted} are in none of {sorted(names)}"
