"""Data parallel for real: two processes under msrun (CPU, mccl). One run of two launches checks what
only shows with several ranks: SIGTERM to one rank stops both after the same step with a
checkpoint; when one rank's newest checkpoint is incomplete (killed while saving) both ranks resume
from the newest step complete on both, and the log names the rank and the step; the resumed steps
repeat the first launch's bitwise and the ranks end identical; and the run continues under another
layout (one process, twice the batch) with the same losses."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from pretrain.synthetic_data import write_dataset
from pretrain.trainer import read_metrics

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def msrun(
    tmp: Path, cfg: Path, data: Path, out: Path, name: str, *extra: str, sigterm_at: int | None = None
) -> Path:
    """Launch 2 workers; with ``sigterm_at`` rank 1 (only) sends itself SIGTERM as that training
    step starts (tests/_run_with_signal.py: at that step whatever the machine's load). Returns the
    log directory; fails with the logs' tails unless msrun exits 0."""
    msrun_bin = Path(sys.executable).parent / "msrun"
    if not msrun_bin.exists():
        msrun_bin = Path(shutil.which("msrun") or "msrun")
    logs = tmp / f"logs-{name}"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    script = "pretrain/run.py"
    if sigterm_at is not None:
        script = "tests/_run_with_signal.py"
        env.update(SIGNAL_AT_STEP=str(sigterm_at), SIGNAL_NAME="SIGTERM", SIGNAL_RANK="1")
    cmd = [
        str(msrun_bin),
        "--worker_num=2",
        "--local_worker_num=2",
        f"--master_port={free_port()}",
        "--join=True",
        f"--log_dir={logs}",
        script,
        "--config",
        str(cfg),
        "--data",
        str(data),
        "--output",
        str(out),
        *extra,
    ]
    proc = subprocess.run(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800
    )  # the timeout bounds a hang only
    tails = "".join(p.read_text(errors="replace")[-2500:] for p in sorted(logs.glob("*.log")))
    assert proc.returncode == 0, tails
    return logs


def worker_log(logs: Path, rank: int) -> str:
    return (logs / f"worker_{rank}.log").read_text(errors="replace")


def params(path: Path) -> dict[str, np.ndarray]:
    import mindspore as ms

    return {n: p.asnumpy() for n, p in ms.load_checkpoint(str(path)).items()}


@pytest.mark.slow
def test_two_ranks_stop_agree_on_a_resume_step_and_resume_under_another_layout(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "data", rows=40, seq_length=16, vocab_size=64)
    cfg: dict[str, Any] = {
        "seed": 3,
        "model": {"hidden_size": 32, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2},
        "train": {"steps": 40, "batch_size": 2, "data_format": "bin"},
        "lr_schedule": {"learning_rate": 1.0e-2, "warmup_steps": 2},
        "parallel": {"data_parallel": 2},
        "checkpoint": {"save_interval": 2, "keep_last": 0},
    }
    (tmp_path / "dp.yaml").write_text(yaml.safe_dump(cfg))
    out = tmp_path / "run"
    ckpts = [out / "checkpoints" / f"rank_{r}" for r in (0, 1)]

    # 1. SIGTERM reaches rank 1 only, at step 5: both ranks stop after the same step k
    logs = msrun(tmp_path, tmp_path / "dp.yaml", data, out, "a", sigterm_at=5)
    stopped = [
        re.findall(r"SIGTERM: stopped after step (\d+) with a checkpoint", worker_log(logs, r))
        for r in (0, 1)
    ]
    assert stopped[0] == stopped[1] and len(stopped[0]) == 1, stopped
    k = int(stopped[0][0])
    assert k == 5 and all((c / f"step_{k:08d}" / "state.json").exists() for c in ckpts)
    assert "dp_rank 1 of 2" in worker_log(logs, 1)
    first = {r["step"]: r["loss"] for r in read_metrics(out / "metrics.jsonl")}
    assert sorted(first) == list(range(1, k + 1))

    # 2. rank 1 was killed while writing step k (its train.ckpt is cut short): both resume from the
    # newest step complete on both ranks, and both logs say which rank lacked which step
    broken = ckpts[1] / f"step_{k:08d}" / "train.ckpt"
    broken.write_bytes(broken.read_bytes()[: broken.stat().st_size // 2])
    j = 2 * ((k - 1) // 2)  # the save before k (save_interval 2)
    logs = msrun(tmp_path, tmp_path / "dp.yaml", data, out, "b", "--resume", "auto", "--steps", str(j + 4))
    for r in (0, 1):
        text = worker_log(logs, r)
        assert (
            f"resume: rank 1 lacks a complete checkpoint of step {k}; all 2 ranks resume from step {j}"
            in text
        )
        assert f"resume: step {j} from" in text
    assert "skipping checkpoint" in worker_log(logs, 1) and "does not match the sha256" in worker_log(logs, 1)
    losses = {r["step"]: r["loss"] for r in read_metrics(out / "metrics.jsonl")}
    rank1 = {r["step"]: r["loss"] for r in read_metrics(out / "metrics.rank1.jsonl")}
    assert sorted(losses) == list(range(1, j + 5)) and losses == rank1
    redone = range(j + 1, k + 1)
    assert [losses[s] for s in redone] == [first[s] for s in redone]  # the resumed steps, bitwise
    assert [r["step"] for r in read_metrics(out / "metrics.dropped.jsonl")] == list(redone)
    p0, p1 = (params(c / f"step_{j + 4:08d}" / "train.ckpt") for c in ckpts)
    assert len([n for n in p0 if n.startswith(("model.", "lm_head"))]) == 2 + 9 * 2 + 1
    for name in p0:
        assert np.array_equal(p0[name], p1[name]), f"ranks differ in {name}"

    # 3. the same run continued from step j as one process with twice the batch (global batch 4)
    from pretrain.config import load_config
    from pretrain.trainer import Trainer

    one = load_config(
        None, {**cfg, "parallel": {"data_parallel": 1}, "train": {**cfg["train"], "batch_size": 4}}
    )
    lines: list[str] = []
    tr = Trainer(one, data, tmp_path / "dp1", log=lines.append)
    records = tr.fit(resume=str(ckpts[0] / f"step_{j:08d}"), stop_at=j + 4)
    assert any("resume: world 2 -> 1 ranks, same global batch 4" in ln for ln in lines)
    assert [r["step"] for r in records] == list(range(j + 1, j + 5))
    # the same rows and the same token normalisation; only float32 sums run in another order (two
    # half-batch gradients all-reduced vs one batch): measured <= 6e-8 relative, one float32 ulp
    np.testing.assert_allclose(
        [r["loss"] for r in records], [losses[s] for s in range(j + 1, j + 5)], rtol=1e-6
    )
