"""Running a recipe: passes over the corpus, per-task completion markers, resume, final outputs.

A recipe's stage list is cut into *passes* at every global stage that needs the whole corpus:

    pass 0: read -> map stages ... -> G1.compute          (one task per input split)
    G1.decide                                           (once, in the driver)
    pass 1: G1.apply -> map stages ... -> G2.compute    (same tasks, reading pass 0's documents)
    ...

Each task of a pass is a pure function of (the run's spec, OUT, pass, task): :func:`task.run_task`.
It writes its documents (frames: Arrow IPC; Parquet only for the documents that become
outputs), its rejected documents and its stats under OUT/work/, then a completion marker, each
through a rename. A rerun skips tasks and decisions whose markers exist, so a run killed at any
point resumes and produces byte-identical outputs; since tasks are fixed by the input (never by
the worker count) and merged in task order, 1 and N workers agree too. Final outputs are
assembled in OUT/.final and moved into place only when complete.

Modules, in the order a run meets them:

* :mod:`~dataprep.executor.run`         ``prepare``: the driver, from the request to the final outputs
* :mod:`~dataprep.executor.outdir`      OUT: the lock, resume or start over, clean-up
* :mod:`~dataprep.executor.pass_loop`   the passes and decides, in the driver
* :mod:`~dataprep.executor.errors`      what a run that ends short raises
* :mod:`~dataprep.executor.context`     :class:`RunContext`: what the driver knows about the run
* :mod:`~dataprep.executor.passes`      cutting a recipe into passes; paths inside OUT
* :mod:`~dataprep.executor.base`        the :class:`Executor` protocol (executors by name:
  :mod:`dataprep.executors`)
* :mod:`~dataprep.executor.pool`        the local process pool (in-process at one worker)
* :mod:`~dataprep.executor.ray`         the Ray executor
* :mod:`~dataprep.executor.task`        the worker side: one task of one pass
* :mod:`~dataprep.executor.warmup`      slow preparations of later stages, run ahead
* :mod:`~dataprep.executor.timing`      wall and CPU seconds per phase (timings.json)
* :mod:`~dataprep.executor.merge`       merging the tasks' stats in task order
* :mod:`~dataprep.executor.finalize`    stats.json, manifest.json, report.html, moved into OUT
"""

from __future__ import annotations

from dataprep.executor.base import Executor
from dataprep.executor.context import RunContext
from dataprep.executor.errors import NothingLeftError, RunError, UsageError
from dataprep.executor.passes import Pass, RunDir, plan_passes
from dataprep.executor.run import prepare

__all__ = [
    "Executor",
    "NothingLeftError",
    "Pass",
    "RunContext",
    "RunDir",
    "RunError",
    "UsageError",
    "plan_passes",
    "prepare",
]
