"""The start of a run on a local pool: its workers start (and import what tasks import) while the
driver plans, and a small input is planned in the driver instead of waiting for them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dataprep.executor.base import Executor
from dataprep.inputs import InputFile
from dataprep.io import compression_of

# Inputs of at most this many bytes and files, none compressed, are planned in the driver:
# planning them reads at most their bytes once (about 0.2 CPU-s per 100 MB) and sniffs each file
# (about 25 µs a file), less than a pool's start-up.
PLAN_IN_DRIVER_BYTES = 256 << 20
PLAN_IN_DRIVER_FILES = 2000


def boot_worker(_: Any = None) -> None:
    """Import what every task imports (the task module, every stage module and the shard formats),
    ahead of the first task."""
    import dataprep.executor.task  # noqa: F401
    from dataprep import stage

    stage.all_stages()


def start_workers(executor: Executor, workers: int) -> None:
    """Start the pool of a local executor now, each worker importing what tasks import
    (:func:`boot_worker`), without waiting: the driver plans and sets the stages up meanwhile.
    Other executors start as they did."""
    from dataprep.executor.pool import LocalExecutor

    if isinstance(executor, LocalExecutor) and executor.has_workers:
        for _ in range(workers):  # a spawning pool starts one process per job submitted
            executor.submit(boot_worker, None)


def plan_map(
    executor: Executor, files: list[InputFile]
) -> Callable[[Callable[[Any], Any], list[Any]], list[Any]]:
    """The map the plan's jobs go through: the driver's own for a small uncompressed input of few
    files (the workers are still starting), the executor's otherwise. The plan is the same
    either way."""
    if (
        len(files) <= PLAN_IN_DRIVER_FILES
        and sum(f.size for f in files) <= PLAN_IN_DRIVER_BYTES
        and not any(compression_of(f.path) for f in files)
    ):
        return lambda fn, items: [fn(x) for x in items]
    return executor.map
