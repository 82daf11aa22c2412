"""What a stage sees: :class:`StageContext` in a worker, per task; :class:`DriverContext` in the
driver, once per run (``setup``, ``decide``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dataprep.document import Drop
from dataprep.stats import StageStats
from dataprep.worker_env import IsolatedProcess

if TYPE_CHECKING:
    from dataprep.executor.base import Executor


@dataclass
class StageContext:
    """What a stage sees while it processes one task.

    stats: this stage's counters for this task (merged by the framework across tasks).
    work_dir: the stage's private directory under OUT/work/ (shared by all tasks; use task_id in
      file names). task_id / task_index / num_tasks: the task being processed; task_index orders
      tasks deterministically. artifacts: what earlier stages published (e.g. "tokenizer").
    """

    stats: StageStats
    work_dir: Path
    task_id: str = ""
    task_index: int = 0
    num_tasks: int = 1
    seed: int = 0
    artifacts: dict[str, Any] = field(default_factory=dict)


@dataclass
class DriverContext:
    """What a stage sees in the driver (``setup`` and ``decide``), once per run.

    task_ids: all tasks in order. output_dir: the staging directory of the final outputs;
    files written there appear in OUT/ when the run completes. publish(): make an artifact
    visible to later stages (and to workers of later passes). quiet: no progress bars.
    executor: where the run's work runs (a process pool or a Ray cluster; None: in this
    process); a decide spreads its work over it with :class:`dataprep.decide_jobs.DecideJobs`
    (e.g. one job per hash partition). workers: how many jobs run at once.
    reject(): drop a document while deciding (a terminal stage, in ``decide``).
    input_sample(max_bytes): texts of the run's input, the same whatever the number of workers:
    the first documents of up to INPUT_SAMPLE_TASKS tasks spread evenly over the plan, as the
    reader emits them (before any stage), up to ``max_bytes`` UTF-8 bytes in all (a document that
    crosses a task's share is cut there).
    """

    work_dir: Path
    output_dir: Path
    task_ids: list[str]
    seed: int
    artifacts: dict[str, Any]
    stats: StageStats
    workers: int = 1
    quiet: bool = False  # no progress bars (``prepare --quiet``)
    executor: Executor | None = None
    while_waiting: Callable[[], None] | None = None  # run by run_isolated while the process works
    label: str = ""  # the stage's label in the recipe
    docs_in: int = 0  # in ``decide``: the documents that reached this stage's ``compute``
    rejected: Any = None  # where ``reject`` writes (a RejectedWriter), in ``decide`` only
    unkept_chars: list[int] = field(default_factory=list)  # characters of each document rejected
    input_sample: Callable[[int], list[str]] | None = None  # None: no input to sample (e.g. in tests)

    def publish(self, name: str, value: Any) -> None:
        self.artifacts[name] = value

    def reject(self, drop: Drop, chars: int | None = None) -> None:
        """Drop, in ``decide``, a document that reached this terminal stage and was so far
        counted as kept (e.g. packing's dropped tail): counted under ``drop.reason``, taken off
        docs_out, written to rejected/. ``chars``: its characters as the stage received them
        (default: those of ``drop.doc.text``)."""
        if self.rejected is None:
            raise RuntimeError(f"{self.label}: documents can be rejected only while deciding")
        chars = len(drop.doc.text) if chars is None else chars
        self.stats.drop(drop.reason, chars, drop.doc.where)
        self.stats.docs_out -= 1
        self.stats.chars_out -= chars
        self.unkept_chars.append(chars)
        self.rejected.write(drop, self.label)

    def run_isolated(self, fn: Callable[[Any], Any], arg: Any, process: IsolatedProcess | None = None) -> Any:
        """fn(arg) in a fresh process that exits afterwards, so the memory it used goes back to the
        system (e.g. tokenizer training); fn must be a module-level function. ``process``: one
        started ahead (:class:`IsolatedProcess`), else a new one. Meanwhile the driver runs
        ``while_waiting`` (the run's warm-ups of later stages, see :meth:`Stage.warm_ups`)."""
        return (process or IsolatedProcess()).run(fn, arg, self.while_waiting)
