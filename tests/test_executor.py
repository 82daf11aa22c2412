"""Executor guarantees: exact accounting, worker-count independence, resume after SIGKILL, staging."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import (
    SAMPLE,
    assert_same_outputs,
    output_bytes,
    prepare_cmd,
    read_stats,
    recipe_with,
    run,
    write_recipe,
)
from dataprep.stats import AccountingError, StageStats, check_accounting

# many small tasks so that 2 workers really interleave and a kill lands mid-pass
SPLIT_RECIPE = recipe_with(split_bytes=1 << 16)


@pytest.mark.e2e
def test_accounting_holds_on_the_sample_corpus(tmp_path: Path) -> None:
    stats = run([SAMPLE], tmp_path / "o", SPLIT_RECIPE)
    t = stats["totals"]
    assert t["docs_in"] == t["kept"] + t["dropped"]
    assert t["dropped"] == sum(t["dropped_by_reason"].values())
    previous = None
    for s in stats["stages"]:
        assert s["docs_in"] == s["docs_out"] + sum(s["drops"].values())
        if previous is not None:  # characters as each stage received them, even when rewritten
            assert (s["docs_in"], s["chars_in"]) == previous, s["label"]
        previous = (s["docs_out"], s["chars_out"])
    normalize = next(s for s in stats["stages"] if s["label"] == "normalize")
    assert normalize["chars_out"] < normalize["chars_in"]  # it rewrites texts in place (CRLF, ...)
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert manifest["documents"] == {"read": t["docs_in"], "kept": t["kept"], "dropped": t["dropped"]}
    assert stats["input"]["tasks"] > 5


def test_check_accounting_catches_a_lost_document() -> None:
    a = StageStats(docs_in=10, docs_out=9)
    a.drop("x", 5)
    b = StageStats(docs_in=9, docs_out=8)  # one document vanished without a reason
    with pytest.raises(AccountingError, match="b: docs_in 9 != docs_out 8"):
        check_accounting(["a", "b"], {"a": a, "b": b})
    c = StageStats(docs_in=8, docs_out=8)  # received fewer than a emitted
    with pytest.raises(AccountingError, match="received 8 documents but the previous stage emitted 9"):
        check_accounting(["a", "c"], {"a": a, "c": c})


@pytest.mark.e2e
def test_output_is_identical_for_1_and_2_workers(tmp_path: Path) -> None:
    run([SAMPLE], tmp_path / "w1", SPLIT_RECIPE, workers=1)
    run([SAMPLE], tmp_path / "w2", SPLIT_RECIPE, workers=2)
    assert_same_outputs(tmp_path / "w2", tmp_path / "w1")
    one = output_bytes(tmp_path / "w1")
    inputs = json.loads((tmp_path / "w2" / "manifest.json").read_text())["inputs"]  # hashed by the workers
    files = sorted(  # every file the reader walks to: hidden entries (.eval/) are skipped
        p
        for p in SAMPLE.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(SAMPLE).parts)
    )
    assert any(p.relative_to(SAMPLE).parts[0] == ".eval" for p in SAMPLE.rglob("*") if p.is_file())
    assert {e["path"]: e["sha256"] for e in inputs} == {
        p.relative_to(SAMPLE).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in files
    }
    assert any(k.startswith("shards/") for k in one) and "rejected/exact_dedup.jsonl.zst" in one


@pytest.mark.e2e
def test_finished_run_leaves_no_intermediates_and_a_rerun_changes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "o"
    run([SAMPLE], out, SPLIT_RECIPE)
    assert sorted(p.name for p in (out / "work").iterdir()) == [
        "complete.json",
        "inputs_sha256.json",
        "outputs.json",
        "plan.json",
        "run.json",
    ]
    first = output_bytes(out)
    timings = (out / "timings.json").read_text()
    cpu = json.loads(timings)["task_cpu_seconds"]  # where the workers' CPU went, per stage
    labels = [s["label"] for s in read_stats(out)["stages"]]
    assert set(labels) - {"read"} <= set(cpu) and "pass0.io" in cpu and all(v >= 0 for v in cpu.values())
    stats = run([SAMPLE], out, SPLIT_RECIPE)
    assert output_bytes(out) == first
    assert (out / "timings.json").read_text() == timings  # nothing was run again
    assert stats == read_stats(out)
    kept = tmp_path / "k"
    run([SAMPLE / "reviews"], kept, SPLIT_RECIPE, keep_work=True)
    assert (kept / "work" / "plan.json").exists() and (kept / "work" / "pass0" / "docs").is_dir()


@pytest.mark.e2e
def test_changed_recipe_starts_over(tmp_path: Path) -> None:
    out = tmp_path / "o"
    run([SAMPLE / "reviews"], out, SPLIT_RECIPE)
    r = recipe_with(split_bytes=1 << 16)
    r["stages"][-1]["pack"]["seq_length"] = 32
    run([SAMPLE / "reviews"], out, r, overwrite=True)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["shards"]["seq_length"] == 32


def test_foreign_output_directory_is_refused(tmp_path: Path) -> None:
    from dataprep.executor import RunError

    out = tmp_path / "o"
    out.mkdir()
    (out / "my_thesis.tex").write_text("precious")
    with pytest.raises(RunError, match="choose another --out"):
        run([SAMPLE / "reviews"], out)
    assert (out / "my_thesis.tex").read_text() == "precious"


def _markers(out: Path, pass_index: int) -> int:
    d = out / "work" / f"pass{pass_index}" / "done"
    return len(list(d.glob("*.json"))) if d.exists() else 0


@pytest.mark.e2e
@pytest.mark.parametrize("kill_when", ["mid_pass1", "mid_pass2", "after_decide"])
def test_sigkill_then_rerun_gives_identical_bytes(tmp_path: Path, kill_when: str) -> None:
    recipe = write_recipe(tmp_path / "r.yaml", SPLIT_RECIPE)
    clean = tmp_path / "clean"
    run([SAMPLE], clean, SPLIT_RECIPE, workers=2)
    out = tmp_path / "killed"
    cmd = prepare_cmd(SAMPLE, out, recipe, "--workers", "2")
    proc = subprocess.Popen(cmd, start_new_session=True, stderr=subprocess.DEVNULL)
    condition = {
        "mid_pass1": lambda: _markers(out, 0) >= 3,
        "mid_pass2": lambda: _markers(out, 1) >= 2,
        "after_decide": lambda: (out / "work" / "pass1" / "decided.json").exists(),
    }[kill_when]
    while not condition():  # the run's end bounds the wait, however slow a busy machine makes it
        assert proc.poll() is None, "the run finished before it could be killed; make the corpus bigger"
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "manifest.json").exists()  # final outputs appear only when complete
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert_same_outputs(out, clean)


@pytest.mark.e2e
def test_shards_decode_back_to_the_kept_documents(tmp_path: Path) -> None:
    """End to end: the token stream between EOS tokens decodes to the kept documents, in order."""
    from dataprep.docstore import read_rejected
    from dataprep.formats import load_tokenizer, open_bin

    src = tmp_path / "in.jsonl"
    texts = [f"第{i}号文档：今天天气很好。" * (1 + i % 5) for i in range(300)]
    texts[7] = texts[3]  # an exact duplicate
    src.write_text(
        "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts), encoding="utf-8"
    )
    out = tmp_path / "o"
    recipe = recipe_with()
    recipe["stages"][-1]["pack"].update(
        shuffle=False, validation_fraction=0.0, equal_shards=False, writers=["bin"]
    )
    run([src], out, recipe)
    manifest = json.loads((out / "manifest.json").read_text())
    sh = manifest["shards"]
    rows = open_bin(out, "train")
    stream = np.concatenate([rows.input_ids(i)[: rows.actual_seq_len(i)[-1]] for i in range(len(rows))])
    tok = load_tokenizer(out / manifest["tokenizer"]["file"])
    ends = np.flatnonzero(stream == sh["eos_id"])
    assert ends[-1] == len(stream) - 1
    decoded = [tok.decode(p[:-1].tolist()) for p in np.split(stream, ends + 1)[:-1]]
    assert decoded == [t for i, t in enumerate(texts) if i != 7]
    assert [r["reason"] for r in read_rejected(out / "rejected" / "exact_dedup.jsonl.zst")] == ["duplicate"]
    assert read_stats(out)["totals"]["kept"] == 299


def test_driver_map_runs_on_the_worker_pool_in_item_order() -> None:
    from dataprep.executor.pool import LocalExecutor

    items = [-5, 3, -1, 0, 8, -2]
    with LocalExecutor(2) as pool:
        assert pool.map(abs, items) == [5, 3, 1, 0, 8, 2]
        assert pool._pool is not None  # really ran on the pool
    with LocalExecutor(1) as inline:
        assert inline.map(abs, items) == [5, 3, 1, 0, 8, 2]


def test_tasks_collect_young_garbage_less_often_and_restore_the_thresholds() -> None:
    import gc

    from dataprep.executor.task import TASK_GC_THRESHOLD, young_collections_every

    before = gc.get_threshold()
    with pytest.raises(RuntimeError), young_collections_every(TASK_GC_THRESHOLD):
        assert gc.get_threshold() == (max(TASK_GC_THRESHOLD, before[0]), *before[1:])
        raise RuntimeError("a failing task")
    assert gc.get_threshold() == before


def test_a_one_worker_run_encodes_with_one_thread_like_a_pool_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataprep.executor import pool as executor
    from dataprep.progress import Progress
    from dataprep.tokenizers.base import default_threads

    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    monkeypatch.setenv("RAYON_NUM_THREADS", "2")
    seen: list[int] = []
    with Progress("t", quiet=True) as bar:
        executor.LocalExecutor(1).run_pass(lambda *_: seen.append(default_threads()), [0, 1], bar)
    assert seen == [1, 1]
    assert default_threads() == 2  # restored after the pass


def test_pool_workers_get_one_library_thread_each_before_numpy_loads() -> None:
    from dataprep.executor.pool import LocalExecutor
    from dataprep.worker_env import ONE_THREAD, worker_setup

    with LocalExecutor(2) as pool:
        found = pool.map(worker_setup, [None, None])
    expected = {name: os.environ.get(name, value) for name, value in ONE_THREAD.items()}
    assert found == [{"numpy_was_loaded": False, **expected}] * 2


def _record_warm_up(_: object) -> None:
    """A warm-up that leaves, in $WARM_UP_DIR, a file per call: process id, then the niceness of
    the calling thread and of the process's main thread."""
    import threading

    here = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    main = os.getpriority(os.PRIO_PROCESS, os.getpid())  # the main thread's id is the pid
    path = Path(os.environ["WARM_UP_DIR"]) / f"{os.getpid()}-{threading.get_native_id()}"
    path.write_text(f"{os.getpid()} {here} {main}")


class _StageWithWarmUps:
    def __init__(self, *fns: object):
        self.fns = list(fns)

    def warm_ups(self) -> list[object]:
        return self.fns


def test_warm_ups_start_once_each_and_only_for_later_stages() -> None:
    from dataprep.executor.warmup import WarmUps

    def a(_: object) -> None: ...
    def b(_: object) -> None: ...
    def c(_: object) -> None: ...

    started: list[object] = []
    stages = [_StageWithWarmUps(a), _StageWithWarmUps(b), _StageWithWarmUps(b, c)]
    warm_ups = WarmUps(stages, started.append)  # type: ignore[arg-type]
    warm_ups.run_after(0)
    assert started == [b, c]
    warm_ups.run_after(-1)
    assert started == [b, c, a]


def test_a_warm_up_at_low_priority_leaves_the_calling_thread_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataprep.executor.warmup import WarmUps, warm_up_at_low_priority

    monkeypatch.setenv("WARM_UP_DIR", str(tmp_path))
    before = os.getpriority(os.PRIO_PROCESS, 0)
    warm_up_at_low_priority(_record_warm_up)
    warm_up_at_low_priority(lambda _: 1 / 0)  # a failing warm-up is ignored
    (record,) = tmp_path.iterdir()
    pid, here, main = map(int, record.read_text().split())
    assert (pid, here, main) == (os.getpid(), 19, before)
    assert os.getpriority(os.PRIO_PROCESS, 0) == before
    # in the driver (one worker) a warm-up runs at the driver's own priority
    record.unlink()
    WarmUps.in_driver([_StageWithWarmUps(_record_warm_up)]).run_after(-1)  # type: ignore[list-item]
    (record,) = tmp_path.iterdir()
    assert record.read_text().split()[1] == str(before)


def test_warm_ups_reach_pool_workers_at_low_priority(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dataprep.executor.pool import LocalExecutor
    from dataprep.executor.warmup import WarmUps

    monkeypatch.setenv("WARM_UP_DIR", str(tmp_path))  # before the pool starts: workers inherit it
    with LocalExecutor(2) as pool:
        futures: list[object] = []
        submit = lambda fn, arg: futures.append(pool.submit(fn, arg))  # noqa: E731
        WarmUps.on_pool([_StageWithWarmUps(_record_warm_up)], submit, 2).run_after(-1)  # type: ignore[list-item]
        assert len(futures) == 2
        for f in futures:
            assert f.result() is None  # type: ignore[attr-defined]
        worker_pids = set(pool.worker_pids())
    records = [tuple(map(int, p.read_text().split())) for p in tmp_path.iterdir()]
    assert len(records) == 2
    for pid, here, main in records:
        assert pid in worker_pids and pid != os.getpid()
        assert here == 19 and main == os.getpriority(os.PRIO_PROCESS, 0)


@pytest.mark.e2e
def test_a_pool_run_warms_its_workers_for_the_shard_writers_while_the_tokenizer_trains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataprep.executor.pool import LocalExecutor
    from dataprep.executor.warmup import warm_up_at_low_priority
    from dataprep.formats.mindrecord_shards import import_mindrecord

    submitted: list[tuple[object, object]] = []
    real_submit = LocalExecutor.submit

    def spy(self: LocalExecutor, fn: object, arg: object) -> object:
        submitted.append((fn, arg))
        return real_submit(self, fn, arg)  # type: ignore[arg-type]

    monkeypatch.setattr(LocalExecutor, "submit", spy)
    recipe = recipe_with(split_bytes=1 << 18)
    recipe["stages"][-1]["pack"]["writers"] = ["mindrecord", "bin"]
    run([SAMPLE], tmp_path / "o", recipe, workers=2)
    warm = [arg for fn, arg in submitted if fn is warm_up_at_low_priority]
    assert warm == [import_mindrecord] * 2
    # sent while the tokenizer trained: before the first job of the packing end
    first_pack_job = next(i for i, (fn, _) in enumerate(submitted) if fn.__module__ == "stages._pack_jobs")
    assert max(i for i, (fn, _) in enumerate(submitted) if fn is warm_up_at_low_priority) < first_pack_job


def test_progress_is_relayed_until_the_end_of_pass_marker() -> None:
    import queue
    import threading

    from dataprep.executor.pool import relay_progress

    updates: queue.Queue[tuple[int, int] | None] = queue.Queue()
    got: list[tuple[int, int]] = []

    class Bar:
        def update(self, docs: int, nbytes: int) -> None:
            got.append((docs, nbytes))

    relay = threading.Thread(target=relay_progress, args=(updates, Bar()))
    relay.start()
    for update in [(3, 30), (1, 7)]:
        updates.put(update)
    updates.put(None)
    updates.put((9, 9))  # the next pass's
    relay.join(timeout=600)  # bounds a hang only: the relay ends at the None
    assert not relay.is_alive()
    assert got == [(3, 30), (1, 7)] and updates.get_nowait() == (9, 9)


def test_executors_are_named_by_their_entry_points_and_the_cli_offers_those_names() -> None:
    from dataprep.cli import build_parser
    from dataprep.executor.pool import LocalExecutor
    from dataprep.executors import executor_names, make_executor

    assert {"local", "ray"} <= set(executor_names())
    with make_executor("local", 1) as local:
        assert isinstance(local, LocalExecutor) and local.workers == 1
    with pytest.raises(ValueError, match=r"unknown executor 'nope' \(known: .*local"):
        make_executor("nope", 1)
    prepare = build_parser()._subparsers._group_actions[0].choices["prepare"]  # type: ignore[union-attr]
    executor = next(a for a in prepare._actions if a.dest == "executor")
    assert list(executor.choices) == executor_names()
