"""The front door holds: the README is short, links every page of docs/, and no link in
the README or docs/ points at a file that is not there, at a heading its page lacks, or
outside the repository; no page cites an issue number."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs").glob("*.md"))
# Every page people write: docs/ and docs/results/, not the sweep reports and runs in there.
WRITTEN = [ROOT / "README.md"] + [
    page
    for page in sorted((ROOT / "docs").rglob("*.md"))
    if not {"runs", "report", "report.md"} & set(page.relative_to(ROOT).parts)
]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def links(page: Path) -> list[str]:
    """Relative link targets of a markdown file, anchors cut off."""
    targets = [t.split("#")[0] for t in LINK.findall(page.read_text(encoding="utf-8"))]
    return [t for t in targets if t and not re.match(r"[a-z]+:", t)]


def test_the_readme_is_short_and_links_every_docs_page():
    readme = ROOT / "README.md"
    assert len(readme.read_text(encoding="utf-8").splitlines()) < 200
    linked = {(ROOT / target).resolve() for target in links(readme)}
    unlinked = [p.name for p in PAGES if p.resolve() not in linked]
    assert not unlinked, f"link these from the README: {unlinked}"


def test_every_link_points_at_a_file_of_the_repository():
    broken = []
    for page in WRITTEN:
        for target in links(page):
            path = (page.parent / target).resolve()
            if not path.exists() or ROOT not in path.parents:
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken


def test_nothing_names_a_file_outside_the_repository():
    texts = [ROOT / "README.md", *PAGES, *(ROOT / "configs").rglob("*.yaml")]
    outside = [str(p.relative_to(ROOT)) for p in texts
               if re.search(r"\.\./shared|DESIGN\.md", p.read_text(encoding="utf-8"))]  # fmt: skip
    assert not outside, outside


def test_no_page_cites_an_issue_number():
    """Issue numbers mean nothing to a reader: pages say what changed, and where, instead."""
    citing = [str(p.relative_to(ROOT)) for p in WRITTEN
              if re.search(r"(?i)\bissues?[\s#-]+\d+", p.read_text(encoding="utf-8"))]  # fmt: skip
    assert not citing, citing


def slugs(page: Path) -> set[str]:
    """The anchors of a markdown page's headings, as GitHub makes them (a repeated heading's
    with -1, -2, ...)."""
    found: set[str] = set()
    in_code = False
    for line in page.read_text(encoding="utf-8").splitlines():
        in_code ^= line.startswith("```")
        if in_code or not line.startswith("#"):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        number, unique = 0, slug
        while unique in found:
            number += 1
            unique = f"{slug}-{number}"
        found.add(unique)
    return found


def test_every_anchor_names_a_heading_of_its_page():
    broken = []
    for page in WRITTEN:
        text = page.read_text(encoding="utf-8")
        for target in LINK.findall(text):
            path, _, anchor = target.partition("#")
            if not anchor or re.match(r"[a-z]+:", path):
                continue
            linked = (page.parent / path).resolve() if path else page
            if linked.suffix == ".md" and anchor not in slugs(linked):
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken
