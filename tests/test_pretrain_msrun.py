"""Data parallel for real: two processes under msrun (CPU, mccl) train one model on disjoint shards
and must end with identical parameters."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from pretrain.synthetic_data import write_dataset
from pretrain.trainer import read_metrics

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_process_data_parallel_ranks_end_identical(tmp_path: Path) -> None:
    import mindspore as ms

    msrun = Path(sys.executable).parent / "msrun"
    if not msrun.exists():
        msrun = Path(shutil.which("msrun") or "msrun")
    data = write_dataset(tmp_path / "data", rows=40, seq_length=16, vocab_size=64)
    cfg = {
        "seed": 3,
        "model": {"hidden_size": 32, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2},
        "train": {"steps": 6, "batch_size": 2, "data_format": "bin"},
        "lr_schedule": {"learning_rate": 1.0e-2, "warmup_steps": 2},
        "parallel": {"data_parallel": 2},
    }
    (tmp_path / "dp.yaml").write_text(yaml.safe_dump(cfg))
    out = tmp_path / "run"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    cmd = [
        str(msrun),
        "--worker_num=2",
        "--local_worker_num=2",
        f"--master_port={free_port()}",
        "--join=True",
        f"--log_dir={tmp_path / 'logs'}",
        "pretrain/run.py",
        "--config",
        str(tmp_path / "dp.yaml"),
        "--data",
        str(data),
        "--output",
        str(out),
    ]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    logs = "".join(p.read_text(errors="replace")[-2000:] for p in sorted((tmp_path / "logs").glob("*.log")))
    assert proc.returncode == 0, logs
    assert "dp_rank 1 of 2" in (tmp_path / "logs" / "worker_1.log").read_text()
    final = [out / "checkpoints" / f"rank_{r}" / "step_00000006" / "train.ckpt" for r in (0, 1)]
    p0, p1 = (ms.load_checkpoint(str(f)) for f in final)
    model_names = [n for n in p0 if n.startswith(("model.", "lm_head"))]
    assert len(model_names) == 2 + 9 * 2 + 1  # embed, norm, lm_head + 9 per layer
    for name in p0:
        assert np.array_equal(p0[name].asnumpy(), p1[name].asnumpy()), f"ranks differ in {name}"
    # both ranks log the same global loss; it is the mean over both shards, so training moved
    l0 = [r["loss"] for r in read_metrics(out / "metrics.jsonl")]
    l1 = [r["loss"] for r in read_metrics(out / "metrics.rank1.jsonl")]
    assert l0 == l1 and len(l0) == 6
