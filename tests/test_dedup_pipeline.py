"""exact -> paragraph -> minhash dedup together: identical outputs for 1 and N workers and after a
crash or a kill at any phase followed by a resume."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from dedup_support import real_docs, run, write_inputs

from stages.minhash_dedup import MinhashDedup

DEDUP = [
    "normalize",
    "exact_dedup",
    {"paragraph_dedup": {"max_docs": 2}},
    {"minhash_dedup": {}},
]


def corpus() -> dict[str, list[dict]]:
    """Five files (tasks) with exact copies, boilerplate lines and near duplicates across tasks,
    and one whose only record is rejected by the reader (a task without documents)."""
    docs = real_docs()
    files: dict[str, list[dict]] = {}
    for f in range(5):
        rows = []
        for i, d in enumerate(docs):
            if (i + f) % 2 == 0:
                text = d["text"]
                if f in (1, 4):
                    text = text.replace("，", ",", 2) + "\n本站所有内容均来自网络，如有侵权请联系删除。"
                rows.append({"id": f"f{f}-{i}", "text": text})
        files[f"part{f}.jsonl"] = rows
    files["part5-empty.jsonl"] = [
        {"id": "no-text", "body": "a record without text"}
    ]  # a task with no document
    return files


def fingerprint(out: Path) -> dict[str, str]:
    """sha256 of every output file that must not depend on workers or resumes."""
    paths = sorted((out / "documents").glob("*")) + sorted((out / "rejected").glob("*"))
    paths += [out / "stats.json", out / "manifest.json"]
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_inputs(tmp_path_factory.mktemp("pipeline"), corpus())


@pytest.fixture(scope="module")
def reference(inputs: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("ref") / "out"
    stats = run(inputs, out, DEDUP, workers=1)
    drops = stats["totals"]["dropped_by_reason"]
    assert drops["exact_dedup/duplicate"] > 0 and drops["minhash_dedup/near_duplicate"] > 0
    assert any(s["counters"].get("paragraphs_removed") for s in stats["stages"])
    return fingerprint(out)


@pytest.mark.e2e
def test_two_workers_give_identical_outputs(inputs: Path, tmp_path: Path, reference: dict) -> None:
    run(inputs, tmp_path / "out", DEDUP, workers=2)
    assert fingerprint(tmp_path / "out") == reference


class Crash(Exception):
    pass


@pytest.mark.e2e
@pytest.mark.parametrize("phase", ["compute", "decide", "apply"])
def test_a_crash_then_resume_gives_identical_outputs(
    inputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, phase: str
) -> None:
    calls = {"n": 0}
    original = getattr(MinhashDedup, phase)

    def crashing(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if phase == "decide":
            original(self, *args, **kwargs)  # every decision file written, no marker yet
            raise Crash
        if calls["n"] == 3:  # in the middle of the tasks of the pass
            raise Crash
        return original(self, *args, **kwargs)

    monkeypatch.setattr(MinhashDedup, phase, crashing)
    one_task_per_file = {"group_files": False}  # the crash falls between tasks
    with pytest.raises(Crash):
        run(inputs, tmp_path / "out", DEDUP, workers=1, input_options=one_task_per_file)
    monkeypatch.setattr(MinhashDedup, phase, original)
    run(inputs, tmp_path / "out", DEDUP, workers=1, input_options=one_task_per_file)
    run(inputs, tmp_path / "clean", DEDUP, workers=1, input_options=one_task_per_file)
    assert fingerprint(tmp_path / "out") == fingerprint(tmp_path / "clean")


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("marker", ["*.bands.parquet", "*.decision.json"])
def test_a_kill_then_resume_gives_identical_outputs(
    inputs: Path, tmp_path: Path, reference: dict, marker: str
) -> None:
    """SIGKILL the whole run as soon as the minhash stage has written its first spill / decision."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({"name": "t", "seed": 0, "stages": DEDUP}))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "dataprep.cli", "prepare", str(inputs), "--out", str(out)]
    cmd += ["--recipe", str(recipe), "--workers", "2", "--quiet"]
    proc = subprocess.Popen(cmd, start_new_session=True, stderr=subprocess.DEVNULL)
    killed = False
    while proc.poll() is None:  # the run's end bounds the wait, however slow a busy machine makes it
        if list(out.glob(f"work/stages/*minhash_dedup/{marker}")):
            os.killpg(proc.pid, signal.SIGKILL)
            killed = True
            break
        time.sleep(0.005)
    proc.wait()
    assert killed, "the run ended before the kill point"
    subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
    assert fingerprint(out) == reference


@pytest.mark.e2e
def test_a_second_run_into_the_same_out_reads_its_own_inputs(tmp_path: Path) -> None:
    """In one process, the cached plan of a previous run into the same OUT must not be reused."""
    first = write_inputs(tmp_path / "one", {"a.jsonl": [{"id": "x", "text": "只有一篇文章"}]})
    second = write_inputs(
        tmp_path / "two", {"b.jsonl": [{"id": f"y{i}", "text": f"第{i}篇"} for i in range(3)]}
    )
    run(first, tmp_path / "out", ["exact_dedup"])
    stats = run(second, tmp_path / "out", ["exact_dedup"], overwrite=True)
    assert stats["totals"]["docs_in"] == 3
