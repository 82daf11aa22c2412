"""Blended training of several prepared outputs (config ``data: [{path, weight}]``): the sample
index follows the weights and not the rank layout, a run killed with SIGKILL resumes at the exact
sample, the loss is logged per source, every run writes run.json, and ``compare`` prints them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from pretrain.blend import BlendedRows, DataEntry, blending_index
from pretrain.data import RowSource, rank_rows
from tests.conftest import REPO, jsonl_bytes, write_recipe
from tests.test_mix import _corpus, _docs, _prepare, _recipe

HANG_S = 1800  # bounds a hung training process only; a run on a busy machine takes far less

TINY = {
    "seed": 5,
    "model": {"hidden_size": 32, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2},
    "train": {"steps": 12, "batch_size": 4, "log_interval": 1, "data_format": "bin"},
    "lr_schedule": {"learning_rate": 1.0e-2, "min_lr": 1.0e-3, "warmup_steps": 2},
    "checkpoint": {"save_interval": 3},
    "eval": {"interval": 6, "max_batches": 2},
}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A mixed output (three sources) and a plain one tokenized with the first one's tokenizer."""
    root = tmp_path_factory.mktemp("blend")
    mixed = root / "mixed"
    _prepare(_recipe(_corpus(root / "in"), validation_fraction=0.05), mixed)
    (root / "plain-in").mkdir()
    (root / "plain-in" / "docs.jsonl").write_bytes(jsonl_bytes(_docs("p", 300, seed=11)))
    plain = root / "plain"
    recipe = {
        "name": "plain",
        "seed": 1,
        "stages": [
            {"tokenize": {"tokenizer": str(mixed / "tokenizer" / "tokenizer.json")}},
            {"pack": {"seq_length": 64, "writers": ["bin"], "validation_fraction": 0.05}},
        ],
    }
    from dataprep.executor import prepare
    from dataprep.recipe import load_recipe

    plain.mkdir()
    path = write_recipe(root / "plain.yaml", recipe)
    prepare([str(root / "plain-in")], plain, load_recipe(str(path)), workers=1, quiet=True)
    return mixed, plain


def _config(tmp: Path, outputs: tuple[Path, Path], name: str) -> Path:
    cfg = json.loads(json.dumps(TINY))
    cfg["data"] = [{"path": str(outputs[0]), "weight": 0.7}, {"path": str(outputs[1]), "weight": 0.3}]
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _cmd(cfg: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "pretrain/run.py", "--config", str(cfg), "--output", str(out), *extra]


def _steps(out: Path) -> dict[int, dict[str, Any]]:
    recs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return {r["step"]: r for r in recs if "loss" in r}


def test_blending_index_follows_the_weights() -> None:
    for weights, n in (([0.7, 0.3], 1000), ([1, 2, 5], 999), ([0.5, 0.5], 7)):
        dataset, within = blending_index(weights, n)
        w = np.asarray(weights, float) / sum(weights)
        for i in range(1, n + 1):
            counts = np.bincount(dataset[:i], minlength=len(w))
            assert np.all(np.abs(counts - w * i) <= 1.0), (weights, i)
        for d in range(len(w)):  # each dataset's samples are taken in turn
            assert np.array_equal(within[dataset == d], np.arange(int((dataset == d).sum())))


@pytest.mark.e2e
def test_blend_is_independent_of_the_rank_layout(outputs: tuple[Path, Path]) -> None:
    from dataprep.formats.readers_for_training import open_split

    splits = [open_split(p, "train", "bin") for p in outputs]
    entries = [DataEntry(str(outputs[0]), 0.7, "mixed"), DataEntry(str(outputs[1]), 0.3, "plain")]
    blend = BlendedRows(entries, splits, seed=5)
    again = BlendedRows(entries, splits, seed=5)
    assert np.array_equal(blend.row, again.row) and np.array_equal(blend.dataset, again.dataset)
    share = np.bincount(blend.dataset) / len(blend)
    assert abs(share[0] - 0.7) < 0.01
    assert blend.labels == ["mixed/small", "mixed/large", "mixed/middle", "plain"]
    # dp 2 x 2 rows and dp 1 x 4 rows read the same samples at every step
    for step in range(3):
        one = RowSource(splits[0], 1, 0, 5, True, rows=blend)
        rows1 = rank_rows(one.order(0), step, 4, 1, 0)
        two = [
            rank_rows(RowSource(splits[0], 2, r, 5, True, rows=blend).order(0), step, 4, 2, r) for r in (0, 1)
        ]
        assert sorted(rows1.tolist()) == sorted(np.concatenate(two).tolist())
    batch = next(blend.batches(np.arange(8), 8))
    assert batch["input_ids"].shape == (8, 65)
    from_plain = batch["blend_id"] == 1
    assert np.all(batch["source_label"][from_plain] == 3)
    assert np.all(batch["source_label"][~from_plain] < 3)


@pytest.mark.e2e
def test_blended_run_resumes_at_the_exact_sample_after_sigkill(
    tmp_path: Path, outputs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _config(tmp_path, outputs, "blend")
    straight = tmp_path / "straight"
    done = subprocess.run(_cmd(cfg, straight), cwd=REPO, capture_output=True, text=True, timeout=HANG_S)
    assert done.returncode == 0, done.stderr[-3000:]
    killed = tmp_path / "killed"
    # kill -9 as step 8 starts, step 7 logged (checkpoints at 3 and 6): sent by the run itself
    # (tests/_run_with_signal.py), at that step whatever the machine's load
    cmd = _cmd(cfg, killed)
    cmd[1] = str(REPO / "tests" / "_run_with_signal.py")
    env = {**os.environ, "SIGNAL_AT_STEP": "8", "SIGNAL_NAME": "SIGKILL"}
    dead = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=HANG_S)
    assert dead.returncode == -signal.SIGKILL, dead.stderr[-3000:]
    assert sorted(_steps(killed)) == list(range(1, 8))
    resumed = subprocess.run(
        _cmd(cfg, killed, "--resume", "auto"), cwd=REPO, capture_output=True, text=True, timeout=HANG_S
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resume: step" in resumed.stdout
    a, b = _steps(straight), _steps(killed)
    assert sorted(a) == sorted(b) == list(range(1, 13))
    for step in a:  # the same samples at every step, and the same losses, bit for bit
        assert a[step]["sample_ids"] == b[step]["sample_ids"], step
        assert a[step]["loss"] == b[step]["loss"], step
    # the loss per source: every label of the blend, the step's loss their token-weighted mean
    labels = {"mixed/small", "mixed/large", "mixed/middle", "plain"}
    seen = {k for r in a.values() for k, v in r["loss_by_source"].items() if v is not None}
    assert seen == labels
    # run.json of both runs, and compare
    for out in (straight, killed):
        run = json.loads((out / "run.json").read_text())
        assert run["steps"] == 12 and run["status"] == "done"
        assert [d["weight"] for d in run["data"]] == [0.7, 0.3]
        assert run["data"][0]["mix"]["sources"]["small"]["target_share"] == 0.2
        assert len(run["data"][0]["manifest_sha256"]) == 64
        assert run["tokenizer"]["sha256"] and run["code_version"]
        assert set(run["final"]["loss_by_source"]) == labels
        assert run["eval"]["step"] == 12 and set(run["eval"]["eval_loss_by_source"]) == labels
        assert Path(run["final_checkpoint"]).is_dir()
        assert run["wall_time_s"] > 0
    killed_run = json.loads((killed / "run.json").read_text())
    assert killed_run["final"]["loss"] == json.loads((straight / "run.json").read_text())["final"]["loss"]
    plot = tmp_path / "cmp.svg"
    from pretrain.run import main

    assert main(["compare", str(straight), str(killed), "--plot", str(plot)]) == 0
    table = capsys.readouterr().out
    assert "straight" in table and "killed" in table and "final loss" in table and "eval loss" in table
    assert "mixed/small" in table and "w=0.7" in table
    assert plot.read_text().count("<polyline") == 2
