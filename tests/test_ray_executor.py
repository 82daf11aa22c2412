"""The Ray executor runs the same tasks, and the same distributed dedup decide, as the local one:
identical bytes for 1 and 2 local workers and Ray, retries on worker death, on a Ray instance the
run starts and on a running cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import (
    SAMPLE,
    assert_same_outputs,
    output_bytes,
    prepare_cmd,
    read_stats,
    recipe_with,
    run,
    stage_stats,
    write_recipe,
)

pytestmark = pytest.mark.e2e

ray = pytest.importorskip("ray")

RECIPE = recipe_with(split_bytes=1 << 16)  # 57 tasks
RECIPE["stages"][2:2] = [{"paragraph_dedup": {}}, {"minhash_dedup": {}}]  # after exact_dedup


def _ray_task_pids() -> list[int]:
    r = subprocess.run(["pgrep", "-f", "ray::_run_counted"], capture_output=True, text=True)
    return [int(p) for p in r.stdout.split()]


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The local executor's output with 2 workers: what every Ray run must reproduce."""
    out = tmp_path_factory.mktemp("ray") / "local"
    run([SAMPLE], out, RECIPE, workers=2)
    return out


def test_ray_output_equals_local_output_even_when_workers_are_killed(tmp_path: Path, local: Path) -> None:
    stats = read_stats(local)  # every dedup stage has work to do on the sample corpus
    assert stage_stats(stats, "exact_dedup")["drops"]["duplicate"] > 0
    assert stage_stats(stats, "paragraph_dedup")["counters"]["paragraphs_removed"] > 0
    assert stage_stats(stats, "minhash_dedup")["drops"]["near_duplicate"] > 0
    one = tmp_path / "one"
    run([SAMPLE], one, RECIPE, workers=1)
    assert output_bytes(one) == output_bytes(local)
    out = tmp_path / "ray"
    recipe = write_recipe(tmp_path / "r.yaml", RECIPE)
    cmd = prepare_cmd(SAMPLE, out, recipe, "--workers", "2", "--executor", "ray")
    killed: list[int] = []
    stop = threading.Event()

    def killer() -> None:  # kill a worker while it runs a task, a few times
        while not stop.is_set() and len(killed) < 3:
            for pid in _ray_task_pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    time.sleep(0.5)
                except ProcessLookupError:
                    pass
                break
            time.sleep(0.01)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    finally:
        stop.set()
        thread.join()
    assert r.returncode == 0, r.stderr[-3000:]
    assert killed, "no Ray task was running long enough to be killed"
    assert_same_outputs(out, local)


def test_running_cluster_is_joined_by_address_and_left_alone_without_one(tmp_path: Path, local: Path) -> None:
    from dataprep.executor.ray import local_ray_head

    recipe = write_recipe(tmp_path / "r.yaml", RECIPE)
    with local_ray_head(2) as address:
        assert address is not None, "the Ray head did not come up"
        joined, own = tmp_path / "joined", tmp_path / "own"
        for out, extra in ((joined, ["--ray-address", address]), (own, [])):
            cmd = prepare_cmd(SAMPLE, out, recipe, "--workers", "2", "--executor", "ray", *extra)
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            assert r.returncode == 0, r.stderr[-3000:]  # without an address: its own instance
            assert_same_outputs(out, local)
