"""A corpus of many small files (one per article, as Chinese corpora ship): prepared end to end,
every document accounted for, planned as a few tasks, and the same documents kept as from the
same texts in one JSONL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import zstandard

from conftest import SMALL_RECIPE, read_stats, run
from dataprep.formats.verify import verify

pytestmark = pytest.mark.e2e  # prepares 20,000 files

FILES = 20_000


def _texts(n: int) -> list[str]:
    """n short articles, every tenth a copy of an earlier one (exact_dedup drops it)."""
    out: list[str] = []
    for i in range(n):
        out.append(
            out[i // 2]
            if i % 10 == 9
            else f"第{i}篇 春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。{i * 7919 % 10007}"
        )
    return out


def _rejected_texts(out: Path) -> list[str]:
    data = zstandard.ZstdDecompressor().stream_reader((out / "rejected" / "exact_dedup.jsonl.zst").open("rb"))
    return sorted(json.loads(line)["text"] for line in data.read().decode("utf-8").splitlines())


def test_twenty_thousand_small_files_are_prepared_like_one_jsonl(tmp_path: Path) -> None:
    texts = _texts(FILES)
    root = tmp_path / "articles"
    for i, text in enumerate(texts):
        d = root / f"d{i // 1000:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{i:06d}.txt").write_text(text + "\n", encoding="utf-8")
    single = tmp_path / "one.jsonl"
    single.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts), "utf-8")

    run([root], tmp_path / "files", SMALL_RECIPE, workers=2)
    run([single], tmp_path / "jsonl", SMALL_RECIPE)

    stats = read_stats(tmp_path / "files")
    assert stats["input"]["files"] == FILES
    assert stats["input"]["tasks"] <= FILES // 500  # a few tasks, not one per file
    totals = stats["totals"]
    assert totals["docs_in"] == FILES
    assert totals["kept"] + totals["dropped"] == FILES
    assert totals["dropped_by_reason"]["exact_dedup/duplicate"] == FILES // 10
    assert verify(tmp_path / "files") == []
    assert verify(tmp_path / "jsonl") == []
    other = read_stats(tmp_path / "jsonl")["totals"]
    assert {k: other[k] for k in ("docs_in", "kept", "dropped")} == {
        k: totals[k] for k in ("docs_in", "kept", "dropped")
    }
    # the same texts dropped, so the same texts kept (ids differ: file:line against one.jsonl:line)
    assert _rejected_texts(tmp_path / "files") == _rejected_texts(tmp_path / "jsonl")
    manifest = json.loads((tmp_path / "files" / "manifest.json").read_text())
    assert len(manifest["inputs"]) == FILES and all(len(e["sha256"]) == 64 for e in manifest["inputs"])
