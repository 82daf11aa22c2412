"""Hostile inputs and real corpus layouts: each case checks the exit code or outcome, the one-line
message naming the file (and line), the exact accounting (documents in = kept + dropped by
reason) and, where the run completes, ``dataprep verify``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import REPO, SAMPLE, output_bytes, read_stats, recipe_with, run, stage_stats

REVIEWS = [
    x for x in (SAMPLE / "reviews" / "reviews.txt").read_text(encoding="utf-8").splitlines() if len(x) > 20
]


def accounting(out: Path) -> tuple[int, int, dict[str, int]]:
    """(documents read by the reader, documents kept at the end, the reader's drops by reason),
    asserting that the reader's records are its documents plus its drops."""
    stats = read_stats(out)
    read = stage_stats(stats, "read")
    assert read["docs_in"] == read["docs_out"] + sum(read["drops"].values())
    totals = stats["totals"]
    assert totals["docs_in"] == totals["kept"] + sum(totals["dropped_by_reason"].values())
    return read["docs_in"], totals["kept"], read["drops"]


def verify(out: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "dataprep.cli", "verify", str(out)], capture_output=True, text=True, cwd=REPO
    )
    assert r.returncode == 0, r.stdout + r.stderr


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dataprep.cli", *args], capture_output=True, text=True, cwd=REPO, timeout=600
    )


def small_files(root: Path, n: int) -> list[str]:
    """n files (n a multiple of 100) of one review line each, the second half repeating the first
    (for exact_dedup), under two directories."""
    texts = []
    for i in range(n):
        text = REVIEWS[i % 50] + f" 第{i % (n // 2 or 1)}号"  # file i + n/2 repeats file i (n/2 % 50 == 0)
        d = root / f"d{i % 2}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:06d}.txt").write_text(text + "\n", encoding="utf-8")
        texts.append(text)
    return texts


def test_small_files_are_grouped_by_bytes_and_outputs_do_not_depend_on_grouping(tmp_path: Path) -> None:
    small_files(tmp_path / "in", 600)
    grouped = tmp_path / "grouped"
    run([tmp_path / "in"], grouped, workers=2, keep_work=True)
    plan = json.loads((grouped / "work" / "plan.json").read_text())["plan"]
    assert len(plan["tasks"]) == 1  # 600 small files: one task of at most 1 MiB
    assert len(plan["tasks"][0]["more"]) == 599
    n_in, kept, drops = accounting(grouped)
    assert n_in == 600 and drops == {}
    assert stage_stats(read_stats(grouped), "exact_dedup")["drops"] == {"duplicate": 300}
    single = tmp_path / "single"
    run([tmp_path / "in"], single, recipe_with(group_files=False), workers=2, keep_work=True)
    assert len(json.loads((single / "work" / "plan.json").read_text())["plan"]["tasks"]) == 600
    ours, theirs = output_bytes(grouped), output_bytes(single)
    shards = [k for k in theirs if k.startswith("shards/")]
    assert shards and all(ours[k] == theirs[k] for k in shards)
    verify(grouped)
