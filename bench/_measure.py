"""Wall time and peak resident memory of a command and all its descendants (Linux /proc)."""

from __future__ import annotations

import os
import resource
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Measured:
    seconds: float
    peak_rss_mb: float  # peak of the summed RSS of the process tree, sampled every 0.1 s
    returncode: int
    stderr: str
    cpu_seconds: float = 0.0  # user + system of the command and the descendants it waited for


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _tree_rss_kb(root: int) -> int:
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        pid = int(entry.name)
        children.setdefault(int(fields.get("PPid", "0").strip() or 0), []).append(pid)
        rss[pid] = int(fields.get("VmRSS", "0 kB").split()[0]) if "VmRSS" in fields else 0
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack += children.get(pid, [])
    return total


_COMPILED = [False]


def compile_project() -> None:
    """Compile the project's modules to bytecode once (what ``make setup`` does), so a measured
    command loads them as an installed package would instead of compiling them in every process
    (Python does not write bytecode where PYTHONDONTWRITEBYTECODE is set)."""
    if not _COMPILED[0]:
        import compileall

        for package in ("dataprep", "stages", "pretrain"):
            compileall.compile_dir(REPO / package, quiet=1, workers=0)
        _COMPILED[0] = True


def run_measured(cmd: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> Measured:
    """Run cmd; its wall seconds, peak RSS of its process tree, and CPU seconds (the command's and
    those of the descendants it waited for: a pool's workers count, daemons it leaves do not).
    The project's bytecode is compiled first (:func:`compile_project`)."""
    compile_project()
    cpu_before = _children_cpu()
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _tree_rss_kb(proc.pid))
            done.wait(0.1)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    _, err = proc.communicate()
    seconds = time.perf_counter() - start
    done.set()
    thread.join()
    return Measured(seconds, peak[0] / 1024, proc.returncode, err, _children_cpu() - cpu_before)


def proc_status_kb(pid: int | str = "self") -> dict[str, int]:
    """Memory fields of /proc/<pid>/status in KiB (VmRSS, RssAnon, RssFile, VmHWM, ...)."""
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if value.strip().endswith("kB"):
                out[key] = int(value.split()[0])
    except OSError:
        pass
    return out


def children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (Linux /proc/<pid>/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    kids = [int(x) for x in f.read().split()]
                out += kids
                todo += kids
        except OSError:
            pass
    return out


class AnonPeak:
    """Peak anonymous RSS (KiB) of this process, sampled every ``interval`` s in a thread
    (file-backed pages, e.g. memory-mapped inputs, are page cache and excluded)."""

    def __init__(self, interval: float = 0.002):
        self.before = proc_status_kb().get("RssAnon", 0)
        self.peak = self.before
        self._done = threading.Event()
        self._interval = interval
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, proc_status_kb().get("RssAnon", 0))
            self._done.wait(self._interval)

    def stop(self) -> int:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, proc_status_kb().get("RssAnon", 0))
        return self.peak


def measured_call(args: tuple) -> tuple:
    """Run fn(x) and return (result, anonymous RSS before in KiB, peak during, peak RSS incl.
    mapped pages): used through a process pool with one call per fresh process."""
    fn, x = args
    sampler = AnonPeak()
    result = fn(x)
    peak = sampler.stop()
    return result, sampler.before, peak, proc_status_kb().get("VmHWM", 0)


class MeasuredExecutor:
    """An executor (:class:`dataprep.executor.base.Executor`, ``map`` only) that runs every call
    in a fresh spawned process (``workers`` at a time) and appends (function name, anonymous KiB
    before, peak, VmHWM) per call to ``records``."""

    has_workers = True

    def __init__(self, records: list, workers: int):
        self.records, self.workers = records, workers

    def map(self, fn, items: list) -> list:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        with ctx.Pool(self.workers, maxtasksperchild=1) as pool:
            got = pool.map(measured_call, [(fn, x) for x in items], chunksize=1)
        self.records.extend((fn.__name__, before, peak, hwm) for _, before, peak, hwm in got)
        return [r for r, *_ in got]

    def submit(self, fn, arg):
        from dataprep.executor.base import done_future

        return done_future(fn, arg)

    def worker_pids(self) -> list[int]:
        return []

    def close(self) -> None:
        pass


def open_text(path: str | Path) -> Any:
    """A UTF-8 text reader over a plain, .gz or .zst/.zstd file."""
    path = Path(path)
    if path.suffix == ".gz":
        import gzip

        return gzip.open(path, "rt", encoding="utf-8")
    if path.suffix in (".zst", ".zstd"):
        import io

        import zstandard

        return io.TextIOWrapper(zstandard.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


def write_result(
    stem: str, title: str, command: str, text: str, results: Path | None = None, into: Path | None = None
) -> Path:
    """Write a benchmark's table to bench/results/<stem>-<date>.md with the machine description
    (architecture, CPUs, Python, load average at the end) and the command that produced it; a
    recorded run is never overwritten: when that file exists, <stem>-<date>-2.md, -3, ...
    ``into``: the path an earlier call of the same run returned, rewritten with the fuller tables."""
    import datetime as dt
    import platform

    machine = (
        f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"load average at the end {os.getloadavg()[0]:.1f}"
    )
    results = results or Path(__file__).resolve().parent / "results"
    results.mkdir(exist_ok=True)
    stamp = dt.date.today().isoformat()
    path = into or results / f"{stem}-{stamp}.md"
    n = 2
    while path.exists() and into is None:
        path = results / f"{stem}-{stamp}-{n}.md"
        n += 1
    path.write_text(
        f"# {title}, {stamp}\n\nMachine: {machine}\n\nCommand: `{command}`\n\n{text}\n", encoding="utf-8"
    )
    return path
