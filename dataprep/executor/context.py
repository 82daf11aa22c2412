"""The run context: what the driver knows about one run of ``prepare`` while it runs it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dataprep.executor.base import Executor
from dataprep.executor.passes import Pass, RunDir
from dataprep.executor.timing import PhaseClock
from dataprep.inputs import InputFile
from dataprep.plan import Plan
from dataprep.recipe import Recipe
from dataprep.stage.protocol import Stage
from dataprep.stats import StageStats


@dataclass
class RunContext:
    """One run in the driver. Fixed once planned: ``run`` (paths in OUT), ``recipe``, ``files``
    (the inputs), ``plan`` (tasks, file hashes and notes), ``stages`` and their ``labels``,
    ``passes``, the ``executor`` and the ``clock``; ``plan_stats`` / ``plan_samples``: what
    planning found wrong with the input. Gathered as it goes: ``artifacts`` (published by
    stages), ``driver_stats`` (per label, from decide phases) and ``manifest_parts`` (the
    manifest entries the decides returned, in order)."""

    run: RunDir
    recipe: Recipe
    files: list[InputFile]
    plan: Plan
    plan_stats: StageStats
    plan_samples: dict[str, list[dict[str, str]]]
    stages: list[Stage]
    labels: list[str]
    passes: list[Pass]
    executor: Executor
    clock: PhaseClock
    workers: int
    quiet: bool = False
    keep_work: bool = False
    peak_out_bytes: int = 0  # the most disk OUT used at a pass, decide or finalize end
    artifacts: dict[str, Any] = field(default_factory=dict)
    driver_stats: dict[str, StageStats] = field(default_factory=dict)
    manifest_parts: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for label in self.labels:
            self.driver_stats.setdefault(label, StageStats())

    @property
    def task_ids(self) -> list[str]:
        return self.plan.task_ids

    input_sha256: dict[str, str | None] = field(default_factory=dict)  # set once pass 0 has run

    @property
    def hashes(self) -> dict[str, str | None]:
        """sha256 of every input file, by its path relative to the input root (None: unread)."""
        return self.input_sha256
