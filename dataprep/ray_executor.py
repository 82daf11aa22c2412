"""Run the tasks of a pass as Ray tasks (``dataprep prepare ... --executor ray``).

The same pure task function as the local executor (:func:`dataprep.executor.run_task`) runs in
Ray workers, so outputs are byte-identical to a local run. Tasks read and write OUT, which must
therefore be a path every Ray node sees (a shared file system); with no address a local Ray
instance is started with ``workers`` CPUs. A worker killed mid-task is retried by Ray (the task
rewrites its files through renames, so a half-done attempt leaves nothing behind); a driver
restarted on the same OUT resumes from the completion markers like a local run.

``ray`` is an optional dependency (``pip install .[ray]``), imported only here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from dataprep.progress import Progress

TASK_RETRIES = 3


def _in_worker(fn: Callable[[Any], Any], arg: Any) -> Any:
    """fn(arg) in a Ray worker, set up like a local pool worker (tokenizers single-threaded:
    every CPU already runs a task). Set here rather than through a runtime_env: workers with a
    runtime_env of their own cannot be the ones Ray started ahead, which costs seconds."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return fn(arg)


def _run_counted(out: str, pass_index: int, task_index: int) -> tuple[int, int]:
    from dataprep.executor import run_task

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    totals = [0, 0]

    def count(docs: int, nbytes: int) -> None:
        totals[0] += docs
        totals[1] += nbytes

    run_task(out, pass_index, task_index, count)
    return totals[0], totals[1]


class RayExecutor:
    """Submits every task of a pass to Ray and waits, updating progress as tasks finish."""

    def __init__(self, workers: int, address: str | None = None):
        try:
            import ray
        except ImportError:
            raise RuntimeError("the ray executor needs Ray: pip install 'dataprep[ray]'") from None
        self._ray = ray
        self._started = False
        if not ray.is_initialized():
            if address:
                ray.init(address=address, log_to_driver=True)
            else:
                ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=True)
            self._started = True
        self._remote = ray.remote(num_cpus=1, max_retries=TASK_RETRIES)(_run_counted)
        self._in_worker = ray.remote(num_cpus=1, max_retries=TASK_RETRIES)(_in_worker)

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._started:
            self._ray.shutdown()

    def map(self, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        """[fn(x) for x in items] as Ray tasks (retried like pass tasks), results in item order."""
        return self._ray.get([self._in_worker.remote(fn, x) for x in items])

    def submit(self, fn: Callable[[Any], Any], arg: Any) -> Future[Any]:
        """Start fn(arg) as a Ray task and return its future (e.g. a warm-up import, or the
        report's plots drawn while the driver decides)."""
        return self._in_worker.remote(fn, arg).future()

    def run_pass(self, out: Path, pass_index: int, task_indices: list[int], bar: Progress) -> None:
        ray = self._ray
        pending: list[Any] = [self._remote.remote(str(out), pass_index, t) for t in task_indices]
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1, timeout=1.0)
                for ref in done:
                    docs, nbytes = ray.get(ref)
                    bar.update(docs, nbytes)
        except ray.exceptions.RayTaskError as e:
            for ref in pending:
                ray.cancel(ref, force=True)
            cause = e.as_instanceof_cause()
            raise cause from None
