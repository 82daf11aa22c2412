"""Inputs are hashed while they are read: pass 0 records the sha256 of every byte range it reads,
a resumed run re-reads only the ranges its completed tasks read, and a range found changed by the
task that reads it stops the run so that the next one starts over."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import jsonl_bytes, output_bytes, recipe_with, run
from dataprep.executor.passes import RunDir

pytestmark = pytest.mark.e2e  # every case runs prepare

RANGED = recipe_with(split_bytes=1 << 16, min_tasks=0)


def _corpus(tmp_path: Path) -> Path:
    """One JSONL of ~400 KB (cut into ranges of 64 KiB) and three small text files."""
    src = tmp_path / "in"
    src.mkdir()
    rows = [{"text": f"第{i}行 " + "字" * (i % 97) + f" line {i} abcdefgh"} for i in range(4000)]
    (src / "big.jsonl").write_bytes(jsonl_bytes(rows))
    for k in range(3):
        (src / f"small{k}.txt").write_text(f"小文件 {k} 的第一行\n第二行 {k}\n", encoding="utf-8")
    return src


def _stopped_in_pass0(out: Path, keep: int) -> list[str]:
    """Make a finished run (kept work) look stopped during pass 0 after its first ``keep`` tasks;
    returns the ids of the tasks left to run."""
    work = out / "work"
    (work / "complete.json").unlink()
    for d in work.glob("pass*"):
        if d.name != "pass0":
            shutil.rmtree(d)
    markers = sorted((work / "pass0" / "done").glob("*.json"))
    for m in markers[keep:]:
        m.unlink()
    return [m.stem for m in markers[keep:]]


def test_the_manifest_records_every_input_by_the_sha256_its_reading_computed(tmp_path: Path) -> None:
    src = _corpus(tmp_path)
    out = tmp_path / "o"
    run([src], out, RANGED, keep_work=True)
    inputs = json.loads((out / "manifest.json").read_text())["inputs"]
    assert {e["path"]: e["sha256"] for e in inputs} == {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in src.iterdir()
    }
    plan = json.loads((out / "work" / "plan.json").read_text())["plan"]
    assert plan["sha256"] == {}  # every file is read by a task: planning hashed none on its own
    assert list(plan["read_sha256"]) == ["big.jsonl"]  # read whole to be cut; small files: only listed
    listed = [
        r
        for p in sorted((out / "work" / "pass0" / "inputs").glob("*.json"))
        for r in json.loads(p.read_text())
    ]
    big = src / "big.jsonl"
    ranges = [(s, e) for path, s, e, _ in listed if path == str(big.resolve())]
    assert len(ranges) > 4 and ranges[0][0] == 0 and ranges[-1][1] == big.stat().st_size
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))  # the whole file, once
    data = big.read_bytes()
    assert all(
        d == hashlib.sha256(data[s:e]).hexdigest() for path, s, e, d in listed if path == str(big.resolve())
    )


def test_a_resume_rereads_only_the_ranges_its_completed_tasks_read(tmp_path: Path, monkeypatch) -> None:
    from dataprep.executor import outdir

    src = _corpus(tmp_path)
    out = tmp_path / "o"
    run([src], out, RANGED, keep_work=True)
    _stopped_in_pass0(out, keep=2)
    reads: list[tuple[str, int, int]] = []
    real = outdir.file_sha256

    def recording(path: str, start: int = 0, end: int = -1) -> str:
        reads.append((Path(path).name, start, end))
        return real(path, start, end)

    monkeypatch.setattr(outdir, "file_sha256", recording)
    assert outdir.changed_inputs(RunDir(out)) == []
    kept = [
        r
        for m in ("t00000", "t00001")
        for r in json.loads((out / "work/pass0/inputs" / f"{m}.json").read_text())
    ]
    assert reads == [(Path(p).name, s, e) for p, s, e, _ in kept]
    size = (src / "big.jsonl").stat().st_size
    assert 0 < sum(e - s for _, s, e in reads) < size // 2  # two ranges of ~64 KiB, not the file


def test_a_range_changed_before_its_task_read_it_stops_the_run_and_the_next_starts_over(
    tmp_path: Path,
) -> None:
    from dataprep.executor import RunError
    from dataprep.readers import InputChanged

    src = _corpus(tmp_path)
    out = tmp_path / "o"
    run([src], out, RANGED, keep_work=True)
    first = output_bytes(out)
    left = _stopped_in_pass0(out, keep=1)
    assert "t00002" in left  # the second range of big.jsonl: not read yet
    big = src / "big.jsonl"
    st = big.stat()
    data = bytearray(big.read_bytes())
    at = 100_000  # inside a later range, same size, newlines kept
    data[at : at + 2000] = data[at : at + 2000].replace(b"abcdefgh", b"hgfedcba")
    big.write_bytes(bytes(data))
    os.utime(big, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(InputChanged, match=r"big\.jsonl: its content changed since this run planned it"):
        run([src], out, RANGED, keep_work=True)
    assert list((out / "work" / "changed").glob("*.json"))
    with pytest.raises(RunError, match=r"content of big\.jsonl changed.*--overwrite"):
        run([src], out, RANGED)
    with pytest.raises(RunError, match="--resume-only"):
        run([src], out, RANGED, resume_only=True, overwrite=True)
    run([src], out, RANGED, overwrite=True)
    clean = tmp_path / "clean"
    run([src], clean, RANGED)
    a, b = output_bytes(out), output_bytes(clean)
    assert [k for k in a if a[k] != b.get(k)] == [] and a != first
