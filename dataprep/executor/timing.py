"""Wall and CPU seconds per phase of a run (``OUT/timings.json``)."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dataprep.executor.base import Executor


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) a live process has used so far; 0 when unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


class PhaseClock:
    """Wall and CPU seconds per phase of a run (``timings.json``). CPU counts this process, its
    finished children (e.g. a tokenizer trained in a process of its own) and the live workers of
    ``executor`` (:meth:`Executor.worker_pids`; read from /proc, so Linux only); driver CPU
    counts this process alone: the serial part of a phase, which more workers do not shorten. On
    a shared machine CPU seconds are the steadier measure."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.driver_cpu: dict[str, float] = {}
        self.executor: Executor | None = None  # None once its workers are gone

    def _cpu(self) -> tuple[float, float]:
        """(CPU seconds of the driver, its children and the workers; of the driver alone)."""
        t = os.times()
        driver = t.user + t.system
        pids = self.executor.worker_pids() if self.executor is not None else []
        workers = sum(process_cpu(pid) for pid in pids)
        others = t.children_user + t.children_system + workers
        return driver + others, driver

    def start(self) -> tuple[float, float, float]:
        return time.monotonic(), *self._cpu()

    def stop(self, name: str, started: tuple[float, float, float]) -> None:
        total, driver = self._cpu()
        self.seconds[name] = self.seconds.get(name, 0.0) + time.monotonic() - started[0]
        self.cpu[name] = self.cpu.get(name, 0.0) + max(total - started[1], 0.0)
        self.driver_cpu[name] = self.driver_cpu.get(name, 0.0) + max(driver - started[2], 0.0)
