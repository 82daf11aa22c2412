"""paragraph_dedup: boilerplate paragraphs are kept only in the first document that has them."""

from __future__ import annotations

from pathlib import Path

import pytest
from dedup_support import kept, rejected, run, run_global, stage_stats, write_inputs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataprep.document import Document, Drop
from dataprep.stage import RecipeError, build_params, get
from stages.paragraph_dedup import ParagraphDedup, ParagraphDedupParams

FOOTER = "版权所有 © 2024 某某科技有限公司 保留所有权利 京ICP备12345678号"
NAV = "首页 | 新闻 | 体育 | 财经 | 科技 | 娱乐 | 联系我们"
SHORT = "责任编辑：王明"  # shorter than min_chars: never removed


def body(i: int) -> str:
    return f"第{i}篇文章的正文，讲述了一个与众不同的故事，内容各不相同，编号{i}。"


def corpus() -> dict[str, list[dict]]:
    docs = [{"id": f"d{i}", "text": "\n".join([NAV, body(i), SHORT, FOOTER])} for i in range(5)]
    docs.append({"id": "only-boilerplate", "text": f"{NAV}\n\n{FOOTER}\n{FOOTER}"})
    docs.append({"id": "twice", "text": f"{body(100)}\n{body(100)}"})
    docs.append({"id": "twice-again", "text": body(100)})  # in 2 documents: not boilerplate
    return {"a.jsonl": docs[:3], "b.jsonl": docs[3:]}


@pytest.mark.e2e
def test_boilerplate_is_removed_from_all_but_the_first_document(tmp_path: Path) -> None:
    inp = write_inputs(tmp_path, corpus())
    stats = run(inp, tmp_path / "out", [{"paragraph_dedup": {"max_docs": 2}}])
    texts = dict(kept(tmp_path / "out"))
    assert texts["d0"] == "\n".join([NAV, body(0), SHORT, FOOTER])
    for i in range(1, 5):
        assert texts[f"d{i}"] == f"{body(i)}\n{SHORT}"
    assert texts["twice"] == f"{body(100)}\n{body(100)}"
    assert texts["twice-again"] == body(100)
    drops = rejected(tmp_path / "out", "paragraph_dedup")
    assert [(r["id"], r["reason"]) for r in drops] == [("only-boilerplate", "duplicate_paragraphs")]
    s = stage_stats(stats, "paragraph_dedup")
    assert s["counters"]["boilerplate_paragraphs"] == 2
    assert s["counters"]["paragraphs_removed"] == 4 * 2 + 3  # FOOTER twice in only-boilerplate
    assert s["counters"]["docs_changed"] == 5
    assert s["counters"]["repeated_paragraphs"] == 3
    assert s["chars_out"] < s["chars_in"]
    assert s["examples"][0]["items"][0]["text"] == f"{NAV}\n{FOOTER}"


@pytest.mark.e2e
def test_paragraph_unit_and_threshold(tmp_path: Path) -> None:
    block = "A long paragraph of legal boilerplate\nthat spans two lines of the footer."
    docs = [{"id": f"d{i}", "text": f"Story number {i} is unique here.\n\n{block}"} for i in range(4)]
    inp = write_inputs(tmp_path, {"a.jsonl": docs})
    run(inp, tmp_path / "k3", [{"paragraph_dedup": {"unit": "paragraph", "max_docs": 3}}])
    texts = dict(kept(tmp_path / "k3"))
    assert texts["d0"].endswith(block) and texts["d3"] == "Story number 3 is unique here."
    run(inp, tmp_path / "k4", [{"paragraph_dedup": {"unit": "paragraph", "max_docs": 4}}])
    assert all(t.endswith(block) for _, t in kept(tmp_path / "k4"))


def test_parameters_are_validated() -> None:
    with pytest.raises(RecipeError, match="max_docs"):
        build_params(get("paragraph_dedup").Params, {"max_docs": 0}, "t")


LINES = [FOOTER, NAV, body(1), body(2), SHORT, ""]


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.lists(st.lists(st.sampled_from(LINES), max_size=5), max_size=5), min_size=1, max_size=3),
    st.integers(1, 3),
)
def test_removed_lines_survive_only_in_their_first_document(
    tmp_path: Path, tasks: list[list[list[str]]], max_docs: int
) -> None:
    docs = [
        [Document(f"{t}-{i}", "\n".join(lines)) for i, lines in enumerate(ds)] for t, ds in enumerate(tasks)
    ]
    order = [d for task in docs for d in task]
    first: dict[str, str] = {}
    count: dict[str, int] = {}
    for d in order:
        for line in set(d.text.split("\n")):
            first.setdefault(line, d.id)
            count[line] = count.get(line, 0) + 1
    stage = ParagraphDedup(build_params(ParagraphDedupParams, {"max_docs": max_docs}, "test"))
    work = tmp_path / f"w{abs(hash(str((tasks, max_docs))))}"
    results, _ = run_global(stage, docs, work)
    for d, r in zip(order, [r for task in results for r in task], strict=True):
        lines = d.text.split("\n")
        expected = [x for x in lines if len(x) < 20 or count[x] <= max_docs or first[x] == d.id]
        if len(expected) == len(lines):
            assert isinstance(r, Document) and r.text == d.text
        elif not "\n".join(expected).strip():
            assert isinstance(r, Drop) and r.reason == "duplicate_paragraphs"
        else:
            assert isinstance(r, Document) and r.text == "\n".join(expected)
