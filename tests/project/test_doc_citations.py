"""Every test the docs cite by name exists: a user reads `tests/FILE.py::test_name` as the evidence of a claim."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CITATION = re.compile(r"(tests/[\w/]+\.py)::(\w+)")
# the record of what was: the changelog and the pre-registrations may name tests as they were then
DOCS = [REPO / "README.md", *(p for p in sorted((REPO / "docs").glob("*.md")) if p.name != "changelog.md"
        and not p.name.startswith("preregistration"))]  # fmt: skip


def citations() -> list[tuple[str, str, str]]:
    return [
        (f"{doc.relative_to(REPO)}:{text[: match.start()].count(chr(10)) + 1}", match.group(1), match.group(2))
        for doc in DOCS
        for text in [doc.read_text(encoding="utf-8")]
        for match in CITATION.finditer(text)
    ]


def test_the_docs_cite_tests():
    assert len(citations()) >= 10  # a pattern that finds nothing would pass every case below


@pytest.mark.parametrize("where, path, name", citations(), ids=[f"{w} {n}" for w, _, n in citations()])
def test_each_cited_test_exists(where, path, name):
    source = REPO / path
    assert source.is_file(), f"{where} cites {path}, which does not exist"
    assert re.search(rf"^\s*(async )?def {name}\(", source.read_text(encoding="utf-8"), re.M), (
        f"{where} cites {path}::{name}, which {path} does not define"
    )
