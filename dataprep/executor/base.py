"""The executor protocol: where a run's work runs.

An executor runs the tasks of a pass (a :data:`PassTask`: :func:`dataprep.executor.task.run_task`
bound to the run's spec, OUT and the pass, a pure function of the task's index) and the
module-level functions of the driver's decide phases, e.g. on a local process pool (``local``) or
on a Ray cluster (``ray``). All run the same code, so the outputs are the same bytes whichever
executor and however many workers. A new executor implements :class:`Executor` and is named in
the ``dataprep.executors`` entry-point group (:mod:`dataprep.executors`); this module names no
implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from dataprep.progress import Progress

T = TypeVar("T")
R = TypeVar("R")

PassTask = Callable[[int, Callable[[int, int], None] | None], None]
"""``task(t, progress)`` runs task ``t`` of a pass and writes its completion marker, calling
``progress(documents, bytes)`` as it goes (None: no reports). Picklable (a ``functools.partial``
of a module-level function), so an executor may send it to other processes as it is."""


class Executor(Protocol):
    """Runs a run's work. ``workers``: how many tasks or calls run at once. ``has_workers``: work
    runs in worker processes (False: everything runs in the driver, in order, as at one local
    worker). Functions sent to ``map`` and ``submit`` are module-level (picklable) functions of one
    argument. Used as a context manager: leaving it closes the executor. Built as
    ``cls(workers, address)`` (:func:`dataprep.executors.make_executor`); ``address``: the
    cluster to join (``--ray-address``), None for the executor's default (an executor without a
    cluster ignores it)."""

    workers: int

    @property
    def has_workers(self) -> bool: ...

    def run_pass(self, task: PassTask, task_indices: list[int], bar: Progress) -> None:
        """``task(t, ...)`` for each of ``task_indices`` (each writes its own completion marker),
        updating ``bar`` with (documents, bytes) as they go; raises the first task's error."""
        ...

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """[fn(x) for x in items], on the workers; results in item order."""
        ...

    def submit(self, fn: Callable[[T], R], arg: T) -> Future[R]:
        """Start fn(arg) on a worker and return its future; without workers, fn(arg) runs now and
        the future is already done (its result or its error)."""
        ...

    def worker_pids(self) -> list[int]:
        """Process ids of the live worker processes on this machine, for CPU accounting ([] when
        they are elsewhere or unknown)."""
        ...

    def close(self) -> None:
        """Stop the workers (and whatever the executor started)."""
        ...

    def __enter__(self: Any) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def done_future(fn: Callable[[T], R], arg: T) -> Future[R]:
    """fn(arg) run now, as a future that is already done (holding its result or its error)."""
    future: Future[R] = Future()
    try:
        future.set_result(fn(arg))
    except Exception as e:
        future.set_exception(e)
    return future
