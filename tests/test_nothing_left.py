"""A run that ends with no document left: stats.json and report.html are written, the run exits 1
with one line counting the documents read and dropped by reason (with the first file:line of the
largest reason) and saying what to change; every document is in rejected/."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_shards_support import REVIEWS, small_tokenizer

from dataprep.docstore import read_rejected
from dataprep.executor import NothingLeftError, prepare
from dataprep.recipe import parse_recipe
from stages.pack import split_of

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    lines = [x for x in REVIEWS.read_text(encoding="utf-8").splitlines() if x.strip()][:200]
    return small_tokenizer(tmp_path_factory.mktemp("tok"), lines)


def default_recipe_with(path: Path, input_options: dict[str, Any] | None = None, **pack: Any) -> Path:
    """The built-in default recipe with ``input:`` options and pack parameters changed."""
    recipe = yaml.safe_load((ROOT / "dataprep" / "recipes" / "default.yaml").read_text(encoding="utf-8"))
    recipe["input"].update(input_options or {})
    next(s for s in recipe["stages"] if "pack" in s)["pack"].update(pack)
    path.write_text(yaml.safe_dump(recipe, allow_unicode=True), encoding="utf-8")
    return path


def prepare_cli(inputs: Path, out: Path, recipe: Path | str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "dataprep.cli", "prepare", str(inputs), "--out", str(out)]
    return subprocess.run(
        [*cmd, "--recipe", str(recipe), "--quiet"], capture_output=True, text=True, timeout=600
    )


def outputs(out: Path) -> tuple[dict[str, Any], str]:
    """(stats.json, the text of report.html) of a run that must have written both."""
    stats = json.loads((out / "stats.json").read_text(encoding="utf-8"))
    return stats, (out / "report.html").read_text(encoding="utf-8")


def rejected(out: Path) -> list[dict[str, Any]]:
    return [r for path in sorted((out / "rejected").glob("*.jsonl.zst")) for r in read_rejected(path)]


def assert_nothing_left(out: Path, line: str, docs: int) -> dict[str, Any]:
    stats, report = outputs(out)
    totals = stats["totals"]
    assert (totals["docs_in"], totals["kept"], totals["dropped"]) == (docs, 0, docs)
    assert stats["outcome"]["status"] == "nothing_left" and stats["outcome"]["message"] in line
    assert "The run failed:" in report
    assert f"<div class='value'>{docs:,}</div><div class='name'>documents read</div>" in report
    assert "<div class='value'>0 (0.0%)</div><div class='name'>kept</div>" in report
    assert len(rejected(out)) == docs  # every document dropped has its record
    return stats


def test_a_jsonl_file_of_one_line_longer_than_max_line_bytes(tmp_path: Path) -> None:
    """The issue's case (a single 54 MB line), with a small max_line_bytes to stay fast."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "big.jsonl").write_text(
        json.dumps({"text": "中文技术文档。" * 3000}, ensure_ascii=False) + "\n"
    )
    recipe = default_recipe_with(tmp_path / "recipe.yaml", {"max_line_bytes": 4096})
    done = prepare_cli(corpus, tmp_path / "out", recipe)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: 0 of 1 documents left: read/line_too_long 1 (first: big.jsonl:1); ")
    assert "raise input.max_line_bytes (now 4096)" in lines[0] and "report.html" in lines[0]
    assert_nothing_left(tmp_path / "out", lines[0], 1)
    again = prepare_cli(corpus, tmp_path / "out", recipe)  # a finished run that left nothing: the same
    assert again.returncode == 1 and again.stderr.strip().splitlines()[-1] == lines[0]


def test_a_corpus_the_filters_drop_whole(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    short = ["你好。", "谢谢！", "好的", "再见。", "是"]
    (corpus / "short.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in short))
    done = prepare_cli(corpus, tmp_path / "out", "default")
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: 0 of 5 documents left: filter_length/too_short 5 (first: short.jsonl:1); ")
    assert "loosen filter_length (min_chars=8" in line
    assert_nothing_left(tmp_path / "out", line, 5)


def copies_for_validation(corpus: Path, fraction: float, n: int) -> list[str]:
    """``n`` copies of one review, with ids that the pack stage puts in the validation split."""
    text = next(x for x in REVIEWS.read_text(encoding="utf-8").splitlines() if len(x) > 60)
    ids = [i for i in (f"v{k}" for k in range(1000)) if split_of(i, fraction) == "validation"][:n]
    corpus.mkdir()
    (corpus / "dup.jsonl").write_text(
        "".join(json.dumps({"id": i, "text": text}, ensure_ascii=False) + "\n" for i in ids)
    )
    return ids


def run_small(corpus: Path, out: Path, stages: list[Any]) -> str:
    """The message of the NothingLeftError the run must end with."""
    recipe = parse_recipe({"name": "t", "stages": stages}, "test recipe")
    with pytest.raises(NothingLeftError) as failed:
        prepare([str(corpus)], out, recipe, workers=1, quiet=True)
    return str(failed.value)


def test_duplicates_whose_one_survivor_goes_to_validation_leave_nothing_to_train_on(tmp_path, tokenizer):
    ids = copies_for_validation(tmp_path / "corpus", 0.5, 4)
    stages = [
        {"exact_dedup": {}},
        {"tokenize": {"tokenizer": str(tokenizer)}},
        {"pack": {"seq_length": 32, "validation_fraction": 0.5, "writers": ["bin"]}},
    ]
    line = run_small(tmp_path / "corpus", tmp_path / "out", stages)
    assert line.startswith(
        f"0 of 4 documents left: exact_dedup/duplicate 3 (first: dup.jsonl (id {ids[1]})), "
        "pack/no_train_documents 1; add documents, or lower pack.validation_fraction (now 0.5); see "
    )
    stats = assert_nothing_left(tmp_path / "out", line, 4)
    assert stats["totals"]["dropped_by_reason"] == {"exact_dedup/duplicate": 3, "pack/no_train_documents": 1}
    (survivor,) = [r for r in rejected(tmp_path / "out") if r["stage"] == "pack"]
    assert survivor["id"] == ids[0] and survivor["extra"]["split"] == "validation" and survivor["text"]
    assert sum(stats["length_chars"]["kept"]["counts"]) == 0
    assert not (tmp_path / "out" / "shards").exists()


def test_a_train_split_shorter_than_one_row_under_tail_drop(tmp_path, tokenizer):
    copies_for_validation(tmp_path / "corpus", 0.5, 3)
    with open(tmp_path / "corpus" / "dup.jsonl", "a", encoding="utf-8") as f:  # one for train
        train_id = next(i for i in (f"t{k}" for k in range(100)) if split_of(i, 0.5) == "train")
        f.write(json.dumps({"id": train_id, "text": "一篇短文，只有一句话。"}, ensure_ascii=False) + "\n")
    stages = [
        {"tokenize": {"tokenizer": str(tokenizer)}},
        {"pack": {"seq_length": 4096, "tail": "drop", "validation_fraction": 0.5, "writers": ["bin"]}},
    ]
    line = run_small(tmp_path / "corpus", tmp_path / "out", stages)
    assert line.startswith(
        "0 of 4 documents left: pack/no_train_rows 3 (first: dup.jsonl (id v0)), pack/tail_dropped 1"
    )
    assert "set pack.tail: pad, or lower pack.seq_length (now 4096)" in line
    assert_nothing_left(tmp_path / "out", line, 4)


def test_a_recipe_without_packing_that_keeps_nothing_fails_too(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("一行。\n两行。\n")
    line = run_small(corpus, tmp_path / "out", [{"filter_length": {"min_chars": 100}}])
    assert line.startswith(
        "0 of 2 documents left: filter_length/too_short 2 (first: a.txt:1); loosen filter_length"
    )
    assert_nothing_left(tmp_path / "out", line, 2)


def test_no_document_read_at_all(tmp_path: Path, tokenizer: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "data.txt").write_bytes(bytes(range(256)) * 20)  # binary
    (corpus / "empty.jsonl").write_bytes(b"")
    stages = [{"tokenize": {"tokenizer": str(tokenizer)}}, {"pack": {"seq_length": 32, "writers": ["bin"]}}]
    line = run_small(corpus, tmp_path / "out", stages)
    assert line.startswith(
        "no document was read from 2 input file(s) (skipped: binary_file 1 (first: data.txt), "
        "empty_file 1 (first: empty.jsonl)): check the INPUT paths and input.format (now auto)"
    )
    stats, report = outputs(tmp_path / "out")
    assert (
        stats["totals"]["docs_in"] == 0
        and stats["outcome"]["message"] in line
        and "The run failed:" in report
    )
