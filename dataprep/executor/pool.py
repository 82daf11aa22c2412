"""The local executor: a pass's tasks on a pool of worker processes, or in the driver at one worker."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from typing import Any, TypeVar

from dataprep import worker_env
from dataprep.executor.base import Executor, PassTask, done_future
from dataprep.progress import Progress

T = TypeVar("T")
R = TypeVar("R")


def pool_task(task: PassTask, task_index: int) -> None:
    """``task(task_index)`` in a pool worker, its progress sent to the driver every quarter second."""
    last = [time.monotonic(), 0, 0]

    def progress(docs: int, nbytes: int) -> None:
        last[1] += docs
        last[2] += nbytes
        now = time.monotonic()
        if now - last[0] > 0.25 and worker_env.progress_queue is not None:
            worker_env.progress_queue.put((last[1], last[2]))
            last[0], last[1], last[2] = now, 0, 0

    task(task_index, progress)
    if worker_env.progress_queue is not None and (last[1] or last[2]):
        worker_env.progress_queue.put((last[1], last[2]))


class LocalExecutor(Executor):
    """Runs a run's work on a pool of ``workers`` spawned processes, started with the first work
    sent to it; with one worker, everything runs in the driver, in order. The workers end when the
    driver does, killed included (:func:`dataprep.worker_env.exit_with_parent`). ``address``: unused
    (the pool runs on this machine)."""

    def __init__(self, workers: int, address: str | None = None):
        self.workers = max(1, workers)
        self._pool: ProcessPoolExecutor | None = None
        self._queue: Any = None
        self._after_pass: list[tuple[Callable[[Any], Any], Any]] = []

    @property
    def has_workers(self) -> bool:
        return self.workers > 1

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def _ensure_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            import multiprocessing as mp

            ctx = mp.get_context("spawn")
            self._queue = ctx.Queue()
            self._pool = ProcessPoolExecutor(
                self.workers,
                mp_context=ctx,
                initializer=worker_env.init_pool_worker,
                initargs=(self._queue, os.getpid()),
            )
        return self._pool

    def worker_pids(self) -> list[int]:
        """Process ids of the driver's live child processes once the pool is up: its workers (and
        a process of a stage's own, e.g. tokenizer training, while it runs)."""
        if self._pool is None:
            return []
        import multiprocessing as mp

        return [p.pid for p in mp.active_children() if p.pid is not None]

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """[fn(x) for x in items] on the pool; a single item runs in this process unless the pool
        is already up (it may hold a warm-up)."""
        if self.workers == 1 or not items or (len(items) == 1 and self._pool is None):
            return [fn(x) for x in items]
        # many small items (e.g. planning thousands of input files) go in chunks, a few per worker
        chunk = max(1, len(items) // (4 * self.workers))
        return list(self._ensure_pool().map(fn, items, chunksize=chunk))

    def submit(self, fn: Callable[[T], R], arg: T) -> Future[R]:
        if self.workers == 1:
            return done_future(fn, arg)
        return self._ensure_pool().submit(fn, arg)

    def submit_after_pass(self, fn: Callable[[T], Any], arg: T) -> None:
        """Submit fn(arg), result unwanted, right after the tasks of the next pass run here (or
        at once with no pool): the pool runs jobs in order, so a worker takes it when no task of
        the pass is left for it."""
        if self.workers == 1:
            fn(arg)
            return
        self._after_pass.append((fn, arg))

    def _submit_after_pass(self) -> None:
        jobs, self._after_pass = self._after_pass, []
        for fn, arg in jobs:
            self._ensure_pool().submit(fn, arg)

    def run_pass(self, task: PassTask, task_indices: list[int], bar: Progress) -> None:
        if self.workers == 1 or len(task_indices) <= 1:
            with worker_env.single_threaded_encoders():  # like a pool worker: one worker, one CPU
                for t in task_indices:
                    task(t, bar.update)
            self._submit_after_pass()
            return
        pool = self._ensure_pool()

        thread = threading.Thread(target=relay_progress, args=(self._queue, bar), daemon=True)
        thread.start()
        try:
            futures = [pool.submit(pool_task, task, t) for t in task_indices]
            self._submit_after_pass()
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            for f in done:
                if f.exception() is not None:
                    for g in futures:
                        g.cancel()
                    raise f.exception()  # type: ignore[misc]
        finally:
            self._queue.put(None)
            thread.join()
            while True:  # updates that came after the None
                try:
                    docs, nbytes = self._queue.get_nowait()
                except Exception:  # queue.Empty
                    break
                bar.update(docs, nbytes)


def relay_progress(queue: Any, bar: Progress) -> None:
    """Pass the workers' (documents, bytes) updates from ``queue`` to ``bar`` until a None, which
    the driver puts when the pass is over (so the relay ends at once, with no polling)."""
    while (update := queue.get()) is not None:
        bar.update(*update)
