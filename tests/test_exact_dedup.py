"""exact_dedup: the first copy in corpus order survives; bounded-memory partitions change nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from dedup_support import kept, rejected, run, run_global, stage_stats, write_inputs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stages._keyspill as keyspill
from dataprep.document import Document, Drop
from dataprep.stage import build_params, get


def build(name: str):
    cls = get(name)
    return cls(build_params(cls.Params, {}, "test"))


def corpus() -> dict[str, list[dict]]:
    texts = [f"document number {i} with its own words" for i in range(40)]
    return {
        "a.jsonl": [{"id": f"a{i}", "text": t} for i, t in enumerate(texts)],
        "b.jsonl": [{"id": f"b{i}", "text": texts[i % 7]} for i in range(10)]
        + [{"id": "b-near", "text": texts[0] + "!"}],
    }


@pytest.mark.e2e
def test_later_copies_are_dropped_naming_the_first(tmp_path: Path) -> None:
    inp = write_inputs(tmp_path, corpus())
    stats = run(inp, tmp_path / "out", ["exact_dedup"])
    records = {r["id"]: r for r in rejected(tmp_path / "out", "exact_dedup")}
    assert set(records) == {f"b{i}" for i in range(10)}
    assert records["b8"]["extra"]["survivor"] == "a1"
    assert records["b0"]["extra"]["cluster_size"] == 3  # a0, b0, b7
    assert records["b0"]["extra"]["cluster"] == records["b7"]["extra"]["cluster"] == 0
    assert records["b0"]["detail"] == "duplicate of a0"
    assert [i for i, _ in kept(tmp_path / "out")] == [f"a{i}" for i in range(40)] + ["b-near"]
    s = stage_stats(stats, "exact_dedup")
    assert s["counters"]["unique_texts"] == 41
    hist = s["histograms"]["cluster_size"]
    assert sum(hist["counts"]) == 7  # seven texts with copies
    assert s["examples"] and s["examples"][0]["items"][0]["label"] == "kept: a0"


@pytest.mark.e2e
def test_tiny_partitions_give_the_same_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inp = write_inputs(tmp_path, corpus())
    run(inp, tmp_path / "one", ["exact_dedup"])
    monkeypatch.setattr(keyspill, "DEFAULT_BUDGET", 4)  # 51 entries -> 16 partitions
    run(inp, tmp_path / "many", ["exact_dedup"])
    assert kept(tmp_path / "one") == kept(tmp_path / "many")
    assert rejected(tmp_path / "one", "exact_dedup") == rejected(tmp_path / "many", "exact_dedup")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.lists(st.sampled_from(["a", "b", "c", "dd", "東", ""]), max_size=8), min_size=1, max_size=4)
)
def test_exactly_the_first_copy_of_every_text_survives(tmp_path: Path, tasks: list[list[str]]) -> None:
    docs = [[Document(f"{t}-{i}", text) for i, text in enumerate(texts)] for t, texts in enumerate(tasks)]
    work = tmp_path / f"w{abs(hash(str(tasks)))}"
    results, _ = run_global(build("exact_dedup"), docs, work)
    seen: dict[str, str] = {}
    for task_docs, task_results in zip(docs, results, strict=True):
        assert len(task_results) == len(task_docs)
        for doc, r in zip(task_docs, task_results, strict=True):
            if doc.text not in seen:
                seen[doc.text] = doc.id
                assert isinstance(r, Document)
            else:
                assert isinstance(r, Drop) and r.extra["survivor"] == seen[doc.text]
