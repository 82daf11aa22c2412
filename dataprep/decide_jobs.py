"""Decide jobs: how a global stage spreads its ``decide`` over the run's workers.

A decide round is a list of *jobs*, each a small frozen dataclass that names what one call does
(``CandidatesJob(layout, partition, partitions)``, not a tuple unpacked by index), and a
module-level function of one job. :class:`DecideJobs` runs them on the run's executor (a local
process pool or a Ray cluster), or in the driver when the run has no worker process, and gives
the same answers either way: ``map`` returns the results in job order, ``submit`` a future (one
that is already done when the job ran in the driver), ``in_order`` streams many jobs with a bounded
number in flight and hands their results over in job order::

    jobs = DecideJobs(ctx)
    counts = jobs.map(count_partition, [PartitionJob(shared, p) for p in range(partitions)])
    jobs.in_order(write_file, file_jobs, take=collect, inputs=lambda job: job.parts)

What every job of a decide shares (paths, task ids, settings) is written once with
:func:`share` and read in each call with :func:`load_shared`, so what travels with a job stays
small whatever the number of tasks. A job must be safe to run twice (a worker that dies is
retried): it writes whole files through renames and never removes what it reads; ``submit`` and
``in_order`` remove a job's ``inputs`` once it has succeeded.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from dataprep.io import write_text_atomic

if TYPE_CHECKING:
    from dataprep.executor.base import Executor
    from dataprep.stage.context import DriverContext

J = TypeVar("J")
R = TypeVar("R")
S = TypeVar("S")

IN_FLIGHT_PER_WORKER = 2  # jobs of ``in_order`` started ahead per worker


def _remove(paths: Iterable[str | Path]) -> None:
    for path in paths:
        Path(path).unlink(missing_ok=True)


class DecideJobs:
    """The decide jobs of one global stage in one run (built from its :class:`DriverContext`, or
    from an executor and a worker count). ``workers``: how many jobs run at once; size rounds by
    it (e.g. at least one partition per worker), never the results."""

    def __init__(
        self, ctx: DriverContext | None = None, *, executor: Executor | None = None, workers: int = 1
    ):
        if ctx is not None:
            executor, workers = ctx.executor, ctx.workers
        self.executor = executor
        self.workers = max(1, workers)

    @property
    def remote(self) -> bool:
        """Jobs run in worker processes (else in the driver, one after the other)."""
        return self.executor is not None and self.executor.has_workers

    def map(self, fn: Callable[[J], R], jobs: Sequence[J]) -> list[R]:
        """[fn(job) for job in jobs] on the workers; results in job order."""
        if self.executor is None:
            return [fn(job) for job in jobs]
        return self.executor.map(fn, list(jobs))

    def submit(self, fn: Callable[[J], R], job: J, inputs: Iterable[str | Path] = ()) -> Future[R]:
        """fn(job) started on a worker, or run now in the driver when the run has no worker
        process; its future either way. ``inputs``: files the job reads, removed once it has
        succeeded (never by the job itself, so that a job retried after its worker died still
        finds them)."""
        if not self.remote:
            from dataprep.executor.base import done_future

            future = done_future(fn, job)
            if future.exception() is None:
                _remove(inputs)
            return future
        assert self.executor is not None
        future = self.executor.submit(fn, job)
        paths = list(inputs)
        if paths:

            def remove_on_success(f: Future[R]) -> None:
                if not f.cancelled() and f.exception() is None:
                    _remove(paths)

            future.add_done_callback(remove_on_success)
        return future

    def in_order(
        self,
        fn: Callable[[J], R],
        jobs: Iterable[J],
        take: Callable[[R], None],
        inputs: Callable[[J], Iterable[str | Path]] | None = None,
    ) -> None:
        """fn(job) for every job, at most IN_FLIGHT_PER_WORKER per worker in flight (``jobs`` may
        be a generator: jobs are made as they go); ``take`` gets the results in job order and
        may start further work. ``inputs(job)``: see :meth:`submit`."""
        in_flight: deque[Future[R]] = deque()
        for job in jobs:
            in_flight.append(self.submit(fn, job, inputs(job) if inputs is not None else ()))
            while len(in_flight) > IN_FLIGHT_PER_WORKER * self.workers:
                take(in_flight.popleft().result())
        while in_flight:
            take(in_flight.popleft().result())


def share(path: Path, shared: Any) -> str:
    """Write what every job of a decide shares (a dataclass of JSON values: paths, task ids,
    settings) to ``path``; jobs carry the returned path rather than the data."""
    write_text_atomic(path, json.dumps(dataclasses.asdict(shared), ensure_ascii=False))
    return str(path)


def load_shared(path: str, cls: type[S]) -> S:
    """The dataclass ``cls`` that :func:`share` wrote to ``path``, parsed once per process and
    file version (a decide's thousands of per-task jobs share one parse: its size grows with the
    task count, so parsing it in every job would make the round quadratic)."""
    st = Path(path).stat()
    return _load_shared(path, cls, st.st_ino, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=4)
def _load_shared(path: str, cls: type[S], inode: int, mtime_ns: int, size: int) -> S:
    return cls(**json.loads(Path(path).read_text(encoding="utf-8")))
