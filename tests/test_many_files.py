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


def test_small_files_that_are_not_text_are_noted_by_the_task_that_reads_them(tmp_path: Path) -> None:
    """Planning only lists a small uncompressed text file; pass 0 checks it as it reads it. The
    notes of those that are not text join planning's in file order, each printed once."""
    import hashlib
    import subprocess
    import sys

    from conftest import recipe_with, write_recipe

    src = tmp_path / "in"
    src.mkdir()
    for k in range(6):
        (src / f"a{k}.txt").write_text(f"第{k}篇 春眠不觉晓，处处闻啼鸟。\n", encoding="utf-8")
    (src / "a2.txt").write_bytes(bytes(range(256)) * 16)  # binary
    (src / "a3.txt").write_bytes(("旧编码的中文文本，" * 40 + "\n").encode("gb18030"))  # not UTF-8
    (src / "a4.txt").write_bytes("宽字符文本\n".encode("utf-16"))  # with its byte-order mark: read
    (src / "b.txt").write_bytes(b"")  # empty: planning notes it without opening it
    (src / "c.pdf").write_bytes(b"%PDF-1.4")  # no reader: planning notes it
    out = tmp_path / "out"
    recipe = write_recipe(tmp_path / "r.yaml", recipe_with(on_error="skip"))
    cmd = [sys.executable, "-m", "dataprep.cli", "prepare", str(src), "--out", str(out)]
    r = subprocess.run(
        [*cmd, "--recipe", str(recipe), "--workers", "2", "--keep-work"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    plan = json.loads((out / "work" / "plan.json").read_text())["plan"]
    assert [n["file"] for n in plan["file_notes"]] == ["b.txt", "c.pdf"]
    stats = read_stats(out)
    notes = [(n["file"], n["kind"]) for n in stats["input"]["file_notes"]]
    assert notes == [
        ("a2.txt", "binary_file"),
        ("a3.txt", "not_utf8"),
        ("b.txt", "empty_file"),
        ("c.pdf", "unsupported"),
    ]
    for name in ("a2.txt", "a3.txt"):
        assert len([x for x in r.stderr.splitlines() if x.startswith(f"warning: {name}: ")]) == 1
    assert stats["input"]["problems"]["files.read"] == 4  # a0, a1, a4 (UTF-16 with its mark), a5
    assert stats["totals"]["docs_in"] == 4  # a line each
    manifest = json.loads((out / "manifest.json").read_text())  # every file hashed as pass 0 read it
    assert {e["path"]: e["sha256"] for e in manifest["inputs"]} == {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in src.iterdir()
    }
    stop = write_recipe(tmp_path / "stop.yaml", recipe_with(on_error="stop"))
    r = subprocess.run(
        [*cmd[:-1], str(tmp_path / "stop"), "--recipe", str(stop), "--quiet"], capture_output=True, text=True
    )
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "error: a2.txt: looks binary (control bytes or undecodable text), skipped "
        "(input.on_error is 'stop'; fix the input or set it to 'skip')"
    ]
