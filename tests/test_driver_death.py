"""A run's worker processes end with its driver, also when the driver is killed (SIGKILL leaves it
no time to shut its pool down): pool workers of `dataprep prepare`, a stage's own process
(``IsolatedProcess``) and the Ray tasks of a Ray instance the run started. (On a cluster joined
by address Ray ends a job's tasks itself when its driver disconnects.)"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from conftest import REPO, prepare_cmd, recipe_with, write_recipe

pytestmark = pytest.mark.e2e  # every case runs and kills prepare

# How long the killed driver's processes get to end. They end within milliseconds; the deadline
# only bounds the wait on a busy machine (without the lifeline they run on for good).
DEADLINE_S = 5.0
HELPERS = Path(__file__).with_name("_driver_death_helpers.py")


def _wait_for(condition: Callable[[], bool], proc: subprocess.Popen, what: str) -> None:
    """Poll ``condition`` while the driver runs (its end bounds the wait; a hang guard of an hour
    catches a driver whose children never start)."""
    deadline = time.monotonic() + 3600
    while not condition():
        assert proc.poll() is None, f"the driver ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within an hour"
        time.sleep(0.01)


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    """The processes still running (a zombie has ended: only its exit status waits to be read)."""
    left = []
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                left.append(p)
    return left


def _kill_driver_and_check(proc: subprocess.Popen, workers: list[psutil.Process]) -> None:
    """SIGKILL the driver alone (not its process group), then every one of ``workers`` must end
    within DEADLINE_S."""
    assert workers, "no worker process found to check"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + DEADLINE_S
    while (left := _alive(workers)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, [f"{p.pid}: {' '.join(p.cmdline())[:120]}" for p in left]


def _cleanup(proc: subprocess.Popen, workers: list[psutil.Process]) -> None:
    """Whatever a failed check left behind (the driver runs in a session of its own)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for p in _alive(workers):
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    proc.wait()


def _big_corpus(path: Path, megabytes: int) -> Path:
    """Distinct Chinese lines, enough for a pass of many tasks that lasts seconds on 2 workers."""
    path.mkdir()
    lines = []
    size = 0
    i = 0
    while size < megabytes << 20:
        body = "".join(chr(0x4E00 + (i * 7919 + k * 104729) % 20000) for k in range(60))
        line = f"第{i}号文档：{body}\n"
        lines.append(line)
        size += len(line.encode())
        i += 1
    (path / "corpus.txt").write_text("".join(lines), encoding="utf-8")
    return path


def _done_markers(out: Path) -> int:
    d = out / "work" / "pass0" / "done"
    return len(list(d.glob("*.json"))) if d.exists() else 0


def _mid_pass_workers(tmp_path: Path, *extra: str) -> subprocess.Popen:
    corpus = _big_corpus(tmp_path / "corpus", 24)
    recipe = write_recipe(tmp_path / "r.yaml", recipe_with(split_bytes=1 << 18))  # ~100 tasks
    out = tmp_path / "out"
    proc = subprocess.Popen(
        prepare_cmd(corpus, out, recipe, "--workers", "2", *extra),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _wait_for(lambda: _done_markers(out) >= 1, proc, "a finished task of pass 0")
    return proc


def test_pool_workers_end_when_the_prepare_driver_is_killed_mid_pass(tmp_path: Path) -> None:
    proc = _mid_pass_workers(tmp_path)
    workers: list[psutil.Process] = []
    try:
        workers = psutil.Process(proc.pid).children(recursive=True)
        # the pool's workers (and multiprocessing's resource tracker): spawned Python processes
        assert sum("multiprocessing" in " ".join(p.cmdline()) for p in workers) >= 2
        _kill_driver_and_check(proc, workers)
    finally:
        _cleanup(proc, workers)


# Ray's idle agents of a node; they end by themselves about a minute after their raylet, using no CPU
RAY_AGENTS = ("ray::DashboardAgent", "ray::RuntimeEnvAgent")


def test_ray_tasks_of_a_local_instance_end_when_the_prepare_driver_is_killed_mid_pass(tmp_path: Path) -> None:
    """The Ray instance the run started (GCS, raylet) and its workers, those that run the run's
    tasks included, end with the driver."""
    pytest.importorskip("ray")
    proc = _mid_pass_workers(tmp_path, "--executor", "ray")
    workers: list[psutil.Process] = []
    try:
        workers = [
            p
            for p in psutil.Process(proc.pid).children(recursive=True)
            if not " ".join(p.cmdline()).startswith(RAY_AGENTS)
        ]
        assert any(" ".join(p.cmdline()).startswith("ray::") for p in workers)  # Ray's workers
        assert any("raylet" in " ".join(p.cmdline()) for p in workers)
        _kill_driver_and_check(proc, workers)
    finally:
        _cleanup(proc, workers)


@pytest.mark.parametrize("where", ["isolated_process", "pool"])
def test_a_process_started_by_the_driver_ends_when_the_driver_is_killed(tmp_path: Path, where: str) -> None:
    """The child spins at 100% CPU in its call, as the workers of a killed run did."""
    started = tmp_path / "started"
    started.mkdir()
    proc = subprocess.Popen(
        [sys.executable, str(HELPERS), where, str(started)],
        cwd=REPO,
        start_new_session=True,
        stderr=subprocess.DEVNULL,
    )
    workers: list[psutil.Process] = []
    try:
        expected = 1 if where == "isolated_process" else 2
        _wait_for(lambda: len(list(started.iterdir())) >= expected, proc, "the calls in the children")
        workers = psutil.Process(proc.pid).children(recursive=True)
        spinning = {int(p.name) for p in started.iterdir()}
        assert spinning <= {p.pid for p in workers}
        _kill_driver_and_check(proc, workers)
    finally:
        _cleanup(proc, workers)


def test_a_child_whose_parent_is_gone_before_it_starts_watching_ends_at_once() -> None:
    """The parent may die between the spawn and the initializer: the child then has another
    parent and ends at once instead of waiting on a process that is not its parent."""
    code = (
        "import os, sys\n"
        "from dataprep.worker_env import exit_with_parent\n"
        "exit_with_parent(os.getppid() + 1 if os.getppid() != 1 else 2)\n"  # not our parent
        "print('still running')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == -signal.SIGKILL and "still running" not in r.stdout
