"""What a resumed run trusts: nothing under OUT/work runs code, and work whose bytes differ from
what its completion marker records is refused with a line naming the file."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import SAMPLE, recipe_with, run
from dataprep.docstore import DocWriter, WorkMismatch, read_docs, sha256_of

SPLIT_RECIPE = recipe_with(split_bytes=1 << 16)


class _Payload:
    """A pickle that touches a file when loaded."""

    def __init__(self, target: Path):
        self.target = target

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.target}",))


def _kept_run(tmp_path: Path) -> Path:
    """A finished run with its work kept, then made to redo every pass after the first (so a rerun
    reads the first pass's frames again)."""
    out = tmp_path / "o"
    run([SAMPLE / "reviews"], out, SPLIT_RECIPE, keep_work=True)
    work = out / "work"
    (work / "complete.json").unlink()
    for d in work.glob("pass*"):
        if d.name != "pass0":
            shutil.rmtree(d)
    return out


def _frame(out: Path) -> Path:
    frames = sorted((out / "work" / "pass0" / "docs").glob("*.frames"))
    assert frames, "the recipe should have more than one pass"
    return frames[0]


@pytest.mark.e2e
def test_a_pickle_planted_in_a_frame_is_refused_and_never_run(tmp_path: Path) -> None:
    out = _kept_run(tmp_path)
    frame = _frame(out)
    touched = tmp_path / "pwned"
    payload = pickle.dumps((_Payload(touched), [], [], [], None, b""))
    frame.write_bytes(len(payload).to_bytes(8, "little") + payload)  # the old frame layout
    with pytest.raises(WorkMismatch, match=f"{frame.name}.*sha256 differs.*--overwrite"):
        run([SAMPLE / "reviews"], out, SPLIT_RECIPE, keep_work=True)
    assert not touched.exists()
    # even with the marker rewritten to match the planted bytes, the file is parsed as data only
    marker = out / "work" / "pass0" / "done" / f"{frame.stem}.json"
    record = json.loads(marker.read_text())
    record["docs_sha256"] = sha256_of(frame)
    marker.write_text(json.dumps(record))
    with pytest.raises(WorkMismatch, match=f"{frame.name}: not a frames file"):
        run([SAMPLE / "reviews"], out, SPLIT_RECIPE, keep_work=True)
    assert not touched.exists()


@pytest.mark.e2e
def test_an_edited_frame_is_refused(tmp_path: Path) -> None:
    out = _kept_run(tmp_path)
    frame = _frame(out)
    docs = [d for batch in read_docs(frame, 1000) for d in batch]
    docs[0].text = docs[0].text[::-1]  # same length, other text
    w = DocWriter(frame)
    w.write(docs)
    w.close()
    with pytest.raises(WorkMismatch, match=f"{frame.name}.*sha256 differs"):
        run([SAMPLE / "reviews"], out, SPLIT_RECIPE, keep_work=True)
    assert not (out / "work" / "complete.json").exists()


@pytest.mark.e2e
def test_a_marker_of_another_run_is_refused(tmp_path: Path) -> None:
    out = _kept_run(tmp_path)
    marker = sorted((out / "work" / "pass0" / "done").glob("*.json"))[0]
    record = json.loads(marker.read_text())
    record["run"] = "0" * 64
    marker.write_text(json.dumps(record))
    with pytest.raises(WorkMismatch, match=f"{marker.name}.*another recipe"):
        run([SAMPLE / "reviews"], out, SPLIT_RECIPE, keep_work=True)


def _copy_input(tmp_path: Path) -> Path:
    src = tmp_path / "in"
    src.mkdir()
    shutil.copy(SAMPLE / "reviews" / "reviews.txt", src / "reviews.txt")
    return src


@pytest.mark.e2e
def test_a_same_size_input_edit_with_its_time_restored_is_detected(tmp_path: Path) -> None:
    from dataprep.executor import RunError

    src = _copy_input(tmp_path)
    out = tmp_path / "o"
    run([src], out, SPLIT_RECIPE)
    first = (out / "manifest.json").read_text()
    f = src / "reviews.txt"
    st = f.stat()
    data = bytearray(f.read_bytes())
    data[:200] = data[:200].replace(b"a", b"b").replace(b"e", b"o")  # same size, other text
    assert bytes(data) != f.read_bytes()
    f.write_bytes(bytes(data))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(RunError, match=r"content of reviews.txt changed.*--overwrite"):
        run([src], out, SPLIT_RECIPE)
    with pytest.raises(RunError, match="--resume-only"):
        run([src], out, SPLIT_RECIPE, resume_only=True, overwrite=True)
    assert (out / "manifest.json").read_text() == first  # refused: nothing was touched
    run([src], out, SPLIT_RECIPE, overwrite=True)
    clean = tmp_path / "clean"
    run([src], clean, SPLIT_RECIPE)
    inputs = [json.loads((d / "manifest.json").read_text())["inputs"] for d in (out, clean)]
    assert inputs[0] == inputs[1] != json.loads(first)["inputs"]
    assert (out / "stats.json").read_bytes() == (clean / "stats.json").read_bytes()
    from conftest import output_bytes

    a, b = output_bytes(out), output_bytes(clean)
    assert [k for k in a if a[k] != b.get(k)] == []


@pytest.mark.e2e
def test_a_users_files_survive_and_a_users_tokenizer_is_never_replaced(tmp_path: Path) -> None:
    from dataprep.executor import RunError

    out = tmp_path / "o"
    run([SAMPLE / "reviews"], out, SPLIT_RECIPE)
    (out / "notes.txt").write_text("mine")
    r = recipe_with(split_bytes=1 << 16)
    r["stages"][-1]["pack"]["seq_length"] = 32
    with pytest.raises(RunError, match=r"starting over would delete .*shards.*--overwrite"):
        run([SAMPLE / "reviews"], out, r)
    run([SAMPLE / "reviews"], out, r, overwrite=True)
    assert (out / "notes.txt").read_text() == "mine"
    assert json.loads((out / "manifest.json").read_text())["shards"]["seq_length"] == 32
    # an entry carrying an output's name that no run wrote is refused, not replaced
    fresh = tmp_path / "f"
    (fresh / "tokenizer").mkdir(parents=True)
    (fresh / "tokenizer" / "tokenizer.json").write_text("{}")
    with pytest.raises(RunError, match="tokenizer"):
        run([SAMPLE / "reviews"], fresh, SPLIT_RECIPE)
    assert (fresh / "tokenizer" / "tokenizer.json").read_text() == "{}"


@pytest.mark.e2e
def test_a_second_run_into_the_same_out_refuses_naming_the_holder(tmp_path: Path) -> None:
    import socket

    from conftest import assert_same_outputs, prepare_cmd, write_recipe

    recipe = write_recipe(tmp_path / "r.yaml", SPLIT_RECIPE)
    out = tmp_path / "o"
    cmd = prepare_cmd(SAMPLE, out, recipe, "--workers", "1")
    first = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)

    def holder() -> object:
        try:
            return json.loads((out / ".lock").read_text()).get("pid")
        except (OSError, ValueError):  # not there yet, or created but not written yet
            return None

    while holder() != first.pid:  # the run's end bounds the wait
        assert first.poll() is None
        time.sleep(0.005)
    first.send_signal(signal.SIGSTOP)  # holds the lock, however long the second run takes to start
    try:
        second = subprocess.run(cmd, capture_output=True, text=True)
    finally:
        first.send_signal(signal.SIGCONT)
    assert first.wait() == 0
    assert second.returncode != 0
    lines = [x for x in second.stderr.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and f"pid {first.pid} on {socket.gethostname()}" in lines[0], second.stderr
    assert not (out / ".lock").exists()
    clean = tmp_path / "clean"
    run([SAMPLE], clean, SPLIT_RECIPE)
    assert_same_outputs(out, clean)


@pytest.mark.e2e
def test_a_stale_lock_of_a_dead_process_is_taken_over(tmp_path: Path) -> None:
    import socket

    dead = subprocess.Popen(["true"])
    dead.wait()
    out = tmp_path / "o"
    out.mkdir()
    (out / ".lock").write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(), "started": "x"}))
    run([SAMPLE / "reviews"], out, SPLIT_RECIPE)
    assert (out / "manifest.json").exists() and not (out / ".lock").exists()


@pytest.mark.e2e
def test_work_left_by_a_run_killed_after_completion_is_cleaned_by_the_next(tmp_path: Path) -> None:
    out = tmp_path / "o"
    run([SAMPLE / "reviews"], out, SPLIT_RECIPE, keep_work=True)  # as if killed before cleaning
    assert (out / "work" / "pass0").is_dir() and (out / "work" / "complete.json").exists()
    run([SAMPLE / "reviews"], out, SPLIT_RECIPE)
    assert sorted(p.name for p in (out / "work").iterdir()) == [
        "complete.json",
        "inputs_sha256.json",
        "outputs.json",
        "plan.json",
        "run.json",
    ]
    assert json.loads((out / "timings.json").read_text())["peak_out_bytes"] > 0


@pytest.mark.e2e
def test_a_full_disk_leaves_no_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from dataprep import stage as registry

    exact = registry.get("exact_dedup")
    left: list[Path] = []

    def full(self: object, ctx: object) -> None:
        half = ctx.work_dir / f".keys.bin.tmp{os.getpid()}"  # type: ignore[attr-defined]
        half.write_bytes(b"x" * 4096)
        left.append(half)
        raise OSError(errno.ENOSPC, "No space left on device", str(half))

    monkeypatch.setattr(exact, "decide", full)
    out = tmp_path / "o"
    with pytest.raises(OSError, match="No space left"):
        run([SAMPLE / "reviews"], out, SPLIT_RECIPE)
    assert left and not left[0].exists()
    assert not [p for p in out.rglob("*") if ".tmp" in p.name] and not (out / ".final").exists()
    assert (out / "work" / "pass0" / "done").is_dir() and not (out / ".lock").exists()  # work kept


def test_an_overlong_line_of_a_compressed_input_is_dropped_without_being_written(tmp_path: Path) -> None:
    import gzip
    import io

    from dataprep.io import decompress_chunks, iter_lines

    limit = 64
    lines = [b"short\n", b"x" * 3_000_000 + b"\n", b"y" * (limit + 1) + b"\n", b"z" * limit + b"\n"]
    lines += [b"q" * (limit - 1) + b"\n", b"w" * 5000]  # the last line without its newline
    data = b"".join(lines * 3)
    src = tmp_path / "a.jsonl.gz"
    src.write_bytes(gzip.compress(data))
    chunks, error, _ = decompress_chunks(src, tmp_path / "c" / "part", 1 << 20, limit)
    assert not error
    written = b"".join(p.read_bytes() for p, _, _ in chunks)
    assert len(written) < 2000  # the 3 MB lines were never written out
    want = list(iter_lines(io.BytesIO(data), limit))
    got = list(iter_lines(io.BytesIO(written), limit))
    assert got == want and None in got  # the same lines, the overlong ones still found too long
    exact, _, _ = decompress_chunks(src, tmp_path / "e" / "part", 1 << 20)
    assert b"".join(p.read_bytes() for p, _, _ in exact) == data


@pytest.mark.e2e
def test_an_edited_rejected_part_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "o"
    run([SAMPLE / "reviews"], out, SPLIT_RECIPE, keep_work=True)
    (out / "work" / "complete.json").unlink()  # finalize again from the kept work
    part = sorted((out / "work").glob("pass*/rejected/*/*.jsonl.zst"))[0]
    part.write_bytes(part.read_bytes() + b"\0")
    with pytest.raises(WorkMismatch, match=f"{part.name}.*sha256 differs"):
        run([SAMPLE / "reviews"], out, SPLIT_RECIPE, keep_work=True)
