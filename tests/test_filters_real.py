"""The cleaning chain on real labelled documents (tests/data/filter_quality_real.jsonl.gz, a
licence-clean slice of bench/realdata's filter-quality set; see tests/data/SOURCES): good
technical documentation with code and tables is kept, garbage is caught no less often than before."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import filter_quality as fq

SLICE = Path(__file__).resolve().parent / "data" / "filter_quality_real.jsonl.gz"
STAGE_TARGET = 0.02  # a stage drops at most this share of the good technical documents
CHAIN_TARGET = 0.05  # the whole chain, of every good category (a category of 36 documents here
# cannot resolve a stage's 2%: one document is 2.8%; bench/filter_quality.py checks it on the set)
# The target for garbage: caught no less often than before the filters judged a document on its
# prose. Bad documents of the slice (dev + heldout) the chain caught then, of keyword_dump 36,
# mojibake 36, spam 36, boilerplate_page 19 (licence files: no filter's job, the slice's are caught
# by none):
CAUGHT_BEFORE = {"keyword_dump": 11, "mojibake": 30, "spam": 2, "boilerplate_page": 0}


@pytest.fixture(scope="module")
def measured() -> tuple[list[dict], list[list[tuple[str, str, float, str]]]]:
    docs = list(fq.read_jsonl(SLICE))
    return docs, fq.verdicts(docs, "default")


def _by_category(measured, quality: str) -> dict[str, list[list[tuple[str, str, float, str]]]]:
    docs, found = measured
    out: dict[str, list] = {}
    for d, vs in zip(docs, found, strict=True):
        if d["quality"] == quality:
            out.setdefault(d["category"], []).append(vs)
    return out


def test_the_slice_holds_real_technical_documentation(measured) -> None:
    docs, _ = measured  # (with the fixture's verdicts computed once for the module)
    tech = [d for d in docs if d["category"].startswith("tech_doc")]
    assert len(tech) >= 80 and all(d["clean"] for d in docs)
    assert sum("```" in d["text"] for d in tech) >= 20  # fenced code
    assert sum("| --" in d["text"] or "|--" in d["text"] or "+--" in d["text"] for d in tech) >= 5  # tables


def _detail(verdicts: list[list[tuple[str, str, float, str]]]) -> list[str]:
    return [f"{v[0]}/{v[1]} {v[3]}" for vs in verdicts for v in vs]


def test_good_technical_documents_are_kept(measured) -> None:
    good = _by_category(measured, "good")
    tech = [vs for c, verdicts in good.items() if c.startswith("tech_doc") for vs in verdicts]
    assert sum(map(bool, tech)) <= CHAIN_TARGET * len(tech), _detail(tech)
    for label, _ in fq.cleaning_stages("default"):
        by_stage = sum(any(v[0] == label for v in vs) for vs in tech)
        assert by_stage <= STAGE_TARGET * len(tech), (label, _detail(tech))


def test_other_good_documents_are_kept(measured) -> None:
    for category, verdicts in _by_category(measured, "good").items():
        assert sum(map(bool, verdicts)) <= CHAIN_TARGET * len(verdicts), (category, _detail(verdicts))


def test_garbage_is_caught_as_often_as_before(measured) -> None:
    bad = _by_category(measured, "bad")
    caught = {c: sum(bool(vs) for vs in verdicts) for c, verdicts in bad.items()}
    assert set(caught) == set(CAUGHT_BEFORE)
    for category, before in CAUGHT_BEFORE.items():
        assert caught[category] >= before, (category, caught[category], before)
