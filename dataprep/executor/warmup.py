"""Warm-ups: slow preparations of later stages (e.g. MindSpore's import for the shard writers), run
ahead, where the stage's work will run, while the driver waits on a process of its own."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dataprep.stage.protocol import Stage
from dataprep.worker_env import start_at_low_priority


class WarmUps:
    """Runs the warm-ups of a run's stages (:meth:`Stage.warm_ups`), once each, ahead of the
    stage that needs them, while the driver waits on a process of its own (``while_waiting``,
    e.g. tokenizer training). ``start(fn)`` runs one warm-up where the stage's work will run: see
    :meth:`in_driver` and :meth:`on_pool`. A warm-up that fails is ignored: the work that needs
    it meets the problem where it belongs."""

    def __init__(self, stages: list[Stage], start: Callable[[Callable[[Any], Any]], None], workers: int = 1):
        self._stages = stages
        self._start = start
        self._workers = workers
        self._done: set[Callable[[Any], Any]] = set()

    @classmethod
    def in_driver(cls, stages: list[Stage]) -> WarmUps:
        """For a run whose driver does the stages' work itself (one worker, local executor)."""

        def start(fn: Callable[[Any], Any]) -> None:
            with contextlib.suppress(Exception):
                fn(None)

        return cls(stages, start)

    @classmethod
    def on_pool(cls, stages: list[Stage], submit: Callable[..., Any], workers: int) -> WarmUps:
        """For ``workers`` pool or Ray workers: each warm-up is sent once per worker (idle
        workers usually take one each; a worker that gets two finds the second done) and runs at
        the lowest CPU priority (:func:`warm_up_at_low_priority`), so it takes only the CPU the
        waited-on process leaves idle. At normal priority, warming two workers during tokenizer
        training slowed the training about as much as it saved."""

        def start(fn: Callable[[Any], Any]) -> None:
            for _ in range(workers):
                submit(warm_up_at_low_priority, fn)

        return cls(stages, start, workers)

    def run_after(self, index: int) -> None:
        """Start the warm-ups of the stages after stage ``index`` not started yet."""
        for st in self._stages[index + 1 :]:
            for fn in st.warm_ups():
                if fn not in self._done:
                    self._done.add(fn)
                    self._start(fn)

    def run_at_pass_end(
        self, stages: Iterable[int], submit_after_pass: Callable[..., Any], meet_dir: Path
    ) -> None:
        """Start the warm-ups of ``stages`` (indices) not started yet as pool jobs queued behind
        the next pass's tasks (``submit_after_pass``, e.g.
        :meth:`dataprep.executor.pool.LocalExecutor.submit_after_pass`), one per worker: a worker
        runs its copy when it finds no task of the pass left, while the others finish theirs,
        instead of in the work that needs it (the decide after the pass, or the next pass's
        tasks). The copies meet in ``meet_dir`` (:func:`warm_up_in_each_worker`), so that each
        runs in a different worker. At normal priority: they take a core the pass leaves idle."""
        for st in (self._stages[i] for i in stages):
            for fn in st.warm_ups():
                if fn not in self._done:
                    self._done.add(fn)
                    meet = meet_dir / f"warm-up-{len(self._done)}"
                    shutil.rmtree(meet, ignore_errors=True)  # an interrupted run's
                    for _ in range(self._workers):
                        submit_after_pass(warm_up_in_each_worker, EachWorker(fn, str(meet), self._workers))


def warm_up(fn: Callable[[Any], Any]) -> None:
    """fn(None), errors ignored (as for any warm-up)."""
    with contextlib.suppress(Exception):
        fn(None)


MEET_SECONDS = 600.0  # the longest a copy of a warm-up waits for the others (a safety net)


@dataclass(frozen=True)
class EachWorker:
    """A warm-up ``fn`` sent as ``copies`` jobs that meet in the directory ``meet``."""

    fn: Callable[[Any], Any]
    meet: str
    copies: int


def warm_up_in_each_worker(job: EachWorker) -> None:
    """One copy of a warm-up sent once per worker: the copy says it has started (a file named by
    its process in ``job.meet``), runs the warm-up, then waits until every copy has started. A
    worker done with its tasks, whose warm-up is often done already (e.g. the tokenizer engine
    of the run's check), so stays on its copy instead of taking the next one, which goes to a
    worker still finishing its last task of the pass. The copies come after the pass's tasks in
    the pool's queue and before anything sent later, so the wait ends when the pass's last task
    does (MEET_SECONDS is only a safety net); a second copy in a process that had one (after
    that net) does not wait."""
    meet = Path(job.meet)
    mine = meet / str(os.getpid())
    again = mine.exists()
    with contextlib.suppress(OSError):
        meet.mkdir(parents=True, exist_ok=True)
        mine.touch()
    warm_up(job.fn)
    deadline = time.monotonic() + MEET_SECONDS
    while not again and time.monotonic() < deadline:
        try:
            if len(os.listdir(meet)) >= job.copies:
                return
        except OSError:
            return
        time.sleep(0.01)


def warm_up_at_low_priority(fn: Callable[[Any], Any]) -> None:
    """fn(None) in a thread of this process at the lowest CPU priority
    (:func:`dataprep.worker_env.start_at_low_priority`), waited for. Errors are ignored, as for
    any warm-up."""
    start_at_low_priority(lambda: fn(None), "warm-up").join()
