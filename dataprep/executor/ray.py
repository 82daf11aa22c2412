"""Run the tasks of a pass as Ray tasks (``dataprep prepare ... --executor ray``).

The same pure task function as the local executor (:func:`dataprep.executor.task.run_task`) runs in
Ray workers, so outputs are byte-identical to a local run. Tasks read and write OUT, which must
therefore be a path every Ray node sees (a shared file system); with no address a local Ray
instance is started with ``workers`` CPUs. A worker killed mid-task is retried by Ray (the task
rewrites its files through renames, so a half-done attempt leaves nothing behind); a driver
restarted on the same OUT resumes from the completion markers like a local run.

A killed driver takes its tasks along. On a local instance the run started, Ray ends its own
processes (GCS and raylet share the driver's fate; workers leave when the raylet does, within
seconds; its idle dashboard and runtime-env agents within about a minute), and every worker that
ran a task of the run also waits on the driver's pid (:func:`dataprep.worker_env.exit_with`) and
ends the moment it is gone. On a cluster joined by address the driver's pid means nothing on
other nodes: there Ray itself ends a job's tasks when its driver disconnects.

``ray`` is an optional dependency (``pip install .[ray]``), imported only here.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from dataprep.executor.base import Executor, PassTask
from dataprep.progress import Progress

T = TypeVar("T")
R = TypeVar("R")

TASK_RETRIES = 3


def _as_pool_worker(driver_pid: int | None) -> None:
    """Set up this Ray worker like a local pool worker (:mod:`dataprep.worker_env`: one library
    thread each, since every CPU already runs a task; Ray sets OMP_NUM_THREADS=1 itself), ending
    when the process ``driver_pid`` of this machine does (None: the driver may be elsewhere). Set
    here rather than through a runtime_env: workers with a runtime_env of their own cannot be the
    ones Ray started ahead, which costs seconds."""
    from dataprep.worker_env import exit_with, one_thread_per_worker

    if driver_pid is not None:
        exit_with(driver_pid)
    one_thread_per_worker()


def _in_worker(fn: Callable[[Any], Any], arg: Any, driver_pid: int | None) -> Any:
    """fn(arg) in a Ray worker set up like a local pool worker."""
    _as_pool_worker(driver_pid)
    return fn(arg)


def _run_counted(task: PassTask, task_index: int, driver_pid: int | None) -> tuple[int, int]:
    """``task(task_index)`` in a Ray worker; returns the (documents, bytes) it went through."""
    _as_pool_worker(driver_pid)
    totals = [0, 0]

    def count(docs: int, nbytes: int) -> None:
        totals[0] += docs
        totals[1] += nbytes

    task(task_index, count)
    return totals[0], totals[1]


class RayExecutor(Executor):
    """Every task of a pass, and every call of ``map`` and ``submit``, as a Ray task of one CPU
    (retried when its worker dies). Joins the cluster at ``address``, else starts a local Ray
    instance of ``workers`` CPUs (shut down by ``close``)."""

    def __init__(self, workers: int, address: str | None = None):
        self.workers = max(1, workers)
        try:
            import ray
        except ImportError:
            raise RuntimeError("the ray executor needs Ray: pip install 'dataprep[ray]'") from None
        self._ray = ray
        self._started = False
        self._driver_pid: int | None = None  # set when the Ray instance is this process's own
        if not ray.is_initialized():
            if address:
                ray.init(address=address, log_to_driver=True)
            else:
                # "local": a new instance even when another one runs on this machine (which a bare
                # ray.init() would join, and refuse num_cpus for)
                ray.init(address="local", num_cpus=workers, include_dashboard=False, log_to_driver=True)
                self._driver_pid = os.getpid()
            self._started = True
        self._remote = ray.remote(num_cpus=1, max_retries=TASK_RETRIES)(_run_counted)
        self._in_worker = ray.remote(num_cpus=1, max_retries=TASK_RETRIES)(_in_worker)

    @property
    def has_workers(self) -> bool:
        return True

    def close(self) -> None:
        if self._started:
            self._ray.shutdown()
            self._started = False

    def worker_pids(self) -> list[int]:
        return []  # Ray's workers are not the driver's processes

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """[fn(x) for x in items] as Ray tasks (retried like pass tasks), results in item order."""
        return self._ray.get([self._in_worker.remote(fn, x, self._driver_pid) for x in items])

    def submit(self, fn: Callable[[T], R], arg: T) -> Future[R]:
        """Start fn(arg) as a Ray task and return its future (e.g. a warm-up import, or the
        report's plots drawn while the driver decides)."""
        return self._in_worker.remote(fn, arg, self._driver_pid).future()

    def run_pass(self, task: PassTask, task_indices: list[int], bar: Progress) -> None:
        ray = self._ray
        shared = ray.put(task)  # the run's spec, sent to the object store once per pass
        pending: list[Any] = [self._remote.remote(shared, t, self._driver_pid) for t in task_indices]
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


@contextlib.contextmanager
def local_ray_head(cpus: int, timeout: float = 60.0) -> Iterator[str | None]:
    """A Ray head of ``cpus`` CPUs on this machine, as ``ray start --head`` makes a cluster's
    first node, for the duration of the block; yields its address for ``--ray-address`` (None when
    it did not come up within ``timeout`` seconds). Stopped by ending its own process group
    (``ray stop`` would stop every Ray instance on the machine). For tests and benchmarks of the
    running-cluster path."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray_cli = str(Path(sys.executable).with_name("ray"))
    cmd = [ray_cli, "start", "--head", "--block", f"--port={port}", f"--num-cpus={cpus}"]
    cmd += ["--include-dashboard=false", "--disable-usage-stats"]
    # Ray >= 2.59 turns token auth on for a head when ~/.ray/auth_token exists (any earlier local
    # ray.init writes one) while clients do not send it: opt out, this head is local and short-lived
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    head = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env
    )
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while head.poll() is None and time.monotonic() < deadline:
            status = subprocess.run([ray_cli, "status", f"--address={address}"], capture_output=True, env=env)
            if status.returncode == 0:
                yield address
                return
            time.sleep(0.5)
        yield None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGTERM)
        head.wait(timeout=60)
