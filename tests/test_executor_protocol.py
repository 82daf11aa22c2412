"""The Executor protocol: a new executor is one class (here a toy that runs everything in the
driver, one call after the other, while claiming workers, so the warm-ups, the report's plots
drawn ahead and every decide job go through its ``submit``), and a run on it writes the same bytes
as the local executor."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from conftest import SMALL_RECIPE, jsonl_bytes, output_bytes, run
from dataprep.executor.base import Executor, PassTask, done_future
from dataprep.progress import Progress

pytestmark = pytest.mark.e2e


class InlineExecutor(Executor):
    """Runs a run's work in this process, in order; counts what it was sent."""

    def __init__(self, workers: int = 2, address: str | None = None) -> None:
        self.workers = workers
        self.sent: dict[str, int] = {"run_pass": 0, "map": 0, "submit": 0}
        self.closed = False

    @property
    def has_workers(self) -> bool:
        return True

    def run_pass(self, task: PassTask, task_indices: list[int], bar: Progress) -> None:
        self.sent["run_pass"] += 1
        for t in task_indices:
            task(t, bar.update)

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        self.sent["map"] += 1
        return [fn(x) for x in items]

    def submit(self, fn: Callable[[Any], Any], arg: Any) -> Future[Any]:
        self.sent["submit"] += 1
        return done_future(fn, arg)

    def worker_pids(self) -> list[int]:
        return []

    def close(self) -> None:
        self.closed = True


def test_a_run_on_a_new_executor_writes_the_same_bytes_as_the_local_one(tmp_path: Path) -> None:
    docs = [
        {"id": f"d{i}", "text": f"第{i}篇。" + "床前明月光，疑是地上霜。" * (1 + i % 5)} for i in range(200)
    ]
    docs += docs[:20]  # exact duplicates for the dedup's decide
    (tmp_path / "c.jsonl").write_bytes(jsonl_bytes(docs))
    executor = InlineExecutor()
    run([tmp_path / "c.jsonl"], tmp_path / "local", SMALL_RECIPE)
    run([tmp_path / "c.jsonl"], tmp_path / "inline", SMALL_RECIPE, executor=executor)
    assert output_bytes(tmp_path / "inline") == output_bytes(tmp_path / "local")
    assert executor.closed
    assert executor.sent["run_pass"] == 3 and executor.sent["map"] >= 2 and executor.sent["submit"] >= 2
