"""Every relative link of the README and docs resolves: to a file of the repository and, with an anchor, to a heading
of that file as GitHub names it (lower case, punctuation dropped, spaces as hyphens; issue 44)."""

import re

import pytest
from conftest import REPO

DOCS = [REPO / "README.md", REPO / "config/README.md", *sorted((REPO / "docs").rglob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def anchors(path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings (a repeated heading gets -1, -2, …)."""
    seen: dict[str, int] = {}
    out = set()
    in_code = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not (m := re.match(r"#{1,6}\s+(.*)", line)):
            continue
        text = re.sub(r"`|\*|_(?=\w)|(?<=\w)_", "", m[1].strip())
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def links(path):
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # links in code blocks are code
    for m in LINK.finditer(text):
        target = m[1] or m[2]
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto: are not checked (no network)
            continue
        if target.startswith("#") or re.search(r"[./]", target):  # not math such as θ[l:](x)
            yield target


CASES = [(doc, target) for doc in DOCS for target in links(doc)]


@pytest.mark.parametrize(("doc", "target"), CASES, ids=[f"{d.relative_to(REPO)}:{t}" for d, t in CASES])
def test_a_relative_link_resolves(doc, target):
    file, _, anchor = target.partition("#")
    path = (doc.parent / file).resolve() if file else doc
    assert path.exists(), f"{doc.relative_to(REPO)} links to {file}, which does not exist"
    if anchor and path.suffix == ".md":
        assert anchor in anchors(path), f"{doc.relative_to(REPO)}: no heading #{anchor} in {path.relative_to(REPO)}"


def test_the_links_are_found():
    """The scan reaches the per-paper results pages (docs/results/*.md) and the README's links into them."""
    scanned = {doc.relative_to(REPO).as_posix() for doc in DOCS}
    assert len(CASES) > 20 and any(t.startswith("docs/results/") and "#" in t for _, t in CASES)
    pages = ("fedzda", "dafl", "feddpms", "flea", "headtohead", "performance")
    assert {f"docs/results/{page}.md" for page in pages} <= scanned
