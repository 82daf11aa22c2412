"""DecideJobs, the framework's helper for a global stage's distributed decide: the same answers with
no executor, one local worker (jobs in the driver) and a pool of two; futures with one worker too;
a bounded number of jobs in flight; a job's input files removed once it succeeded."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from dataprep.decide_jobs import IN_FLIGHT_PER_WORKER, DecideJobs, load_shared, share
from dataprep.document import Document
from dataprep.executor.pool import LocalExecutor
from dataprep.stage import DriverContext, GlobalStage, StageContext
from dataprep.stats import StageStats


@dataclass(frozen=True)
class _Shared:
    """What every job of the toy decide shares."""

    work_dir: str
    task_ids: list[str]
    buckets: int


@dataclass(frozen=True)
class BucketJob:
    shared: str
    bucket: int


@dataclass(frozen=True)
class BucketResult:
    bucket: int
    lengths: int  # distinct document lengths in the bucket
    pid: int


def count_bucket(job: BucketJob) -> BucketResult:
    """Distinct lengths (mod buckets == bucket) over every task's spill: one job per bucket."""
    shared = load_shared(job.shared, _Shared)
    seen: set[int] = set()
    for t in shared.task_ids:
        lengths = np.load(Path(shared.work_dir) / f"{t}.lengths.npy")
        seen |= {int(x) for x in lengths if int(x) % shared.buckets == job.bucket}
    return BucketResult(job.bucket, len(seen), os.getpid())


class DistinctLengths(GlobalStage):
    """A toy global stage: compute spills each task's document lengths, decide counts the distinct
    lengths in buckets, one job per bucket, with DecideJobs."""

    name = "toy_distinct_lengths"

    def __init__(self) -> None:
        super().__init__(None)
        self.pids: set[int] = set()

    def compute(self, batch: list[Document], ctx: StageContext) -> None:
        np.save(ctx.work_dir / f"{ctx.task_id}.lengths.npy", np.asarray([len(d.text) for d in batch]))

    def decide(self, ctx: DriverContext) -> dict:
        jobs = DecideJobs(ctx)
        buckets = 2 * jobs.workers
        shared = share(ctx.work_dir / "shared.json", _Shared(str(ctx.work_dir), ctx.task_ids, buckets))
        results = jobs.map(count_bucket, [BucketJob(shared, b) for b in range(buckets)])
        assert [r.bucket for r in results] == list(range(buckets))  # job order
        self.pids = {r.pid for r in results}
        ctx.stats.count("distinct_lengths", sum(r.lengths for r in results))
        return {"distinct_lengths": sum(r.lengths for r in results)}


def _decide(tmp_path: Path, executor: LocalExecutor | None, workers: int) -> tuple[dict, set[int]]:
    work = tmp_path / f"work-{workers}-{executor is not None}"
    work.mkdir()
    stage = DistinctLengths()
    task_ids = [f"t{i:05d}" for i in range(5)]
    for i, t in enumerate(task_ids):
        docs = [Document(f"{t}-{k}", "x" * ((7 * i + 3 * k) % 23 + 1), "s") for k in range(40)]
        stage.compute(docs, StageContext(StageStats(), work, t, i, len(task_ids)))
    ctx = DriverContext(work, work, task_ids, 0, {}, StageStats(), workers=workers, executor=executor)
    return stage.decide(ctx), stage.pids


@pytest.fixture(scope="module")
def pool() -> Iterator[LocalExecutor]:
    with LocalExecutor(2) as executor:
        yield executor


def test_a_toy_global_stage_decides_the_same_without_workers_with_one_and_with_two(
    tmp_path: Path, pool: LocalExecutor
) -> None:
    alone, pids = _decide(tmp_path, None, 1)
    assert pids == {os.getpid()}
    with LocalExecutor(1) as one:
        assert _decide(tmp_path, one, 1) == (alone, {os.getpid()})  # in the driver
    # the answer never depends on the worker count (here 4 buckets instead of 2)
    two, pids = _decide(tmp_path, pool, 2)
    assert two == alone
    assert os.getpid() not in pids


def _square(x: int) -> int:
    return x * x


def test_submit_returns_a_future_with_one_worker_too(pool: LocalExecutor) -> None:
    for executor in (None, LocalExecutor(1)):
        jobs = DecideJobs(executor=executor)
        assert not jobs.remote
        future = jobs.submit(_square, 7)
        assert isinstance(future, Future) and future.done() and future.result() == 49
        failed = jobs.submit(_square, "x")  # type: ignore[arg-type]
        assert failed.done() and isinstance(failed.exception(), TypeError)
    jobs = DecideJobs(executor=pool, workers=2)
    assert jobs.remote and jobs.submit(_square, 9).result() == 81
    assert jobs.map(_square, list(range(10))) == [x * x for x in range(10)]


class _Threads:
    """An executor (only what DecideJobs uses) whose worker is a thread."""

    has_workers = True

    def __init__(self, threads: ThreadPoolExecutor):
        self.threads = threads

    def submit(self, fn, arg):  # type: ignore[no-untyped-def]
        return self.threads.submit(fn, arg)


@pytest.mark.parametrize("pool", [False, True])
def test_a_jobs_input_files_go_once_it_succeeded_and_stay_when_it_failed(tmp_path, pool):
    """Jobs never remove what they read (a job retried after its worker died must find it): the
    driver does, once the job has succeeded."""

    def read(path: str) -> str:
        text = Path(path).read_text()
        if text == "bad":
            raise ValueError("bad input")
        return text

    with ThreadPoolExecutor(1) as threads:
        jobs = DecideJobs(executor=_Threads(threads) if pool else None)  # type: ignore[arg-type]
        good, bad = tmp_path / "good", tmp_path / "bad"
        good.write_text("good")
        bad.write_text("bad")
        assert jobs.submit(read, str(good), [str(good)]).result() == "good"
        with pytest.raises(ValueError, match="bad input"):
            jobs.submit(read, str(bad), [str(bad)]).result()
    assert not good.exists() and bad.exists()


def test_in_order_hands_results_over_in_job_order_with_a_bounded_number_in_flight(tmp_path: Path) -> None:
    started: list[int] = []
    taken: list[int] = []

    def make_jobs():  # a generator: jobs are made as they go
        for k in range(20):
            started.append(k)
            yield k

    def take(result: int) -> None:
        taken.append(result)
        # jobs made so far: those taken, plus at most IN_FLIGHT_PER_WORKER * workers in flight + 1
        assert len(started) - len(taken) <= IN_FLIGHT_PER_WORKER * 3

    with ThreadPoolExecutor(3) as threads:
        jobs = DecideJobs(executor=_Threads(threads), workers=3)  # type: ignore[arg-type]
        jobs.in_order(_square, make_jobs(), take)
    assert taken == [k * k for k in range(20)]


def test_shared_settings_round_trip(tmp_path: Path) -> None:
    path = share(tmp_path / "s.json", _Shared("w", ["t00000"], 4))
    assert load_shared(path, _Shared) == _Shared("w", ["t00000"], 4)
    assert json.loads(Path(path).read_text()) == {"work_dir": "w", "task_ids": ["t00000"], "buckets": 4}
