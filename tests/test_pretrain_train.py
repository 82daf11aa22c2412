"""Training loop behaviour on tiny models and synthetic shards: exact resume in a new process,
gradient accumulation, fp16 overflow skipping, guard rails, checkpoints, CLI errors, overfit check."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from pretrain.config import ConfigError, load_config
from pretrain.synthetic_data import write_dataset
from pretrain.trainer import Trainer, TrainingError, read_metrics

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parent.parent
HANG_S = 1800  # bounds a hung training process only; a run on a busy machine takes far less

TINY = {
    "seed": 3,
    "model": {"hidden_size": 32, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2},
    "train": {"steps": 8, "batch_size": 4, "grad_accumulation_steps": 1, "log_interval": 1},
    "lr_schedule": {"learning_rate": 1.0e-2, "min_lr": 1.0e-3, "warmup_steps": 2},
}


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(base))
    for k, v in over.items():
        out[k] = {**out.get(k, {}), **v} if isinstance(v, dict) else v
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(
        tmp_path_factory.mktemp("data"),
        rows=40,
        seq_length=16,
        vocab_size=64,
        formats=("bin", "mindrecord"),
        validation_rows=8,
    )


def cli_command(tmp: Path, cfg: dict[str, Any], data: Path, out: Path, *extra: str) -> list[str]:
    path = tmp / f"cfg-{abs(hash(json.dumps(cfg, sort_keys=True)))}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return [
        sys.executable,
        "pretrain/run.py",
        "--config",
        str(path),
        "--data",
        str(data),
        "--output",
        str(out),
        *extra,
    ]


def run_cli(
    tmp: Path, cfg: dict[str, Any], data: Path, out: Path, *extra: str
) -> subprocess.CompletedProcess:
    cmd = cli_command(tmp, cfg, data, out, *extra)
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=HANG_S)


def run_cli_with_sigterm(tmp: Path, cfg: dict[str, Any], data: Path, out: Path, step: int) -> tuple[int, str]:
    """Run the CLI, which sends itself SIGTERM as training step ``step`` starts (at that step,
    whatever the machine's load; tests/_run_with_signal.py); returns (exit code, output)."""
    cmd = cli_command(tmp, cfg, data, out)
    cmd[1] = str(REPO / "tests" / "_run_with_signal.py")
    env = {**os.environ, "SIGNAL_AT_STEP": str(step), "SIGNAL_NAME": "SIGTERM"}
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=HANG_S)
    return r.returncode, r.stdout + r.stderr


def losses(out: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_metrics(out / "metrics.jsonl") if "loss" in r}


@pytest.mark.parametrize(
    ("fmt", "over", "interrupt"),
    [
        # the first half ends by SIGTERM at step 5 (a checkpoint there, between the saves at 7 and 14)
        ("bin", {"train": {"grad_accumulation_steps": 2, "batch_size": 2}}, "sigterm"),
        # float16 with a loss scale that grows every 3 steps: the scale must be restored too
        ("mindrecord", {"train": {"amp_level": "O2", "loss_scale": {"init": 1024.0, "window": 3}}}, "steps"),
    ],
)
def test_resume_in_a_new_process_is_bitwise_exact(
    tmp_path: Path, data: Path, fmt: str, over: dict, interrupt: str
) -> None:
    """2N steps straight == a first run stopped early (--steps N, or SIGTERM), then resume in a new
    process to the end (N crosses an epoch)."""
    cfg = merged(
        TINY,
        {
            "train": {**TINY["train"], "steps": 14, "data_format": fmt, **over["train"]},
            "checkpoint": {"save_interval": 7},
            "eval": {"interval": 7, "max_batches": 2},
        },
    )
    straight = run_cli(tmp_path, cfg, data, tmp_path / "straight")
    assert straight.returncode == 0, straight.stderr[-3000:]
    if interrupt == "steps":
        first = run_cli(tmp_path, cfg, data, tmp_path / "resumed", "--steps", "7")
        assert first.returncode == 0, first.stderr[-3000:]
        stopped = 7
    else:
        code, text = run_cli_with_sigterm(tmp_path, cfg, data, tmp_path / "resumed", step=5)
        assert code == 0, text[-3000:]
        found = re.search(r"SIGTERM: stopped after step (\d+) with a checkpoint", text)
        assert found, text[-3000:]
        stopped = int(found.group(1))
        assert stopped == 5
        assert (
            tmp_path / "resumed" / "checkpoints" / "rank_0" / f"step_{stopped:08d}" / "state.json"
        ).exists()
        assert sorted(losses(tmp_path / "resumed")) == list(range(1, stopped + 1))
    second = run_cli(tmp_path, cfg, data, tmp_path / "resumed", "--resume", "auto")
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"resume: step {stopped}" in second.stdout
    a, b = losses(tmp_path / "straight"), losses(tmp_path / "resumed")
    assert sorted(a) == sorted(b) == list(range(1, 15))
    assert [a[s] for s in a] == [b[s] for s in a]  # bitwise: exact float equality after the resume
    # logs, eval, plot of the straight run
    recs = read_metrics(tmp_path / "straight" / "metrics.jsonl")
    step_rec = next(r for r in recs if "loss" in r)
    assert {"loss", "lr", "grad_norm", "tokens_per_s", "data_wait_share", "loss_scale", "skipped"} <= set(
        step_rec
    )
    evals = [r for r in recs if "eval_loss" in r]
    assert [r["step"] for r in evals] == [7, 14] and all(r["eval_ppl"] > 1 for r in evals)
    assert (tmp_path / "straight" / "loss.png").stat().st_size > 1000
    assert np.mean([a[s] for s in range(11, 15)]) < np.mean([a[s] for s in range(1, 4)])


def make_trainer(data: Path, out: Path, over: dict[str, Any]) -> Trainer:
    return Trainer(load_config(None, merged(TINY, over)), data, out, log=lambda m: None)


def params_of(tr: Trainer) -> dict[str, np.ndarray]:
    return {p.name: p.asnumpy().copy() for p in tr.params}


def cli(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str]:
    from pretrain.run import main

    code = main(argv)
    out = capsys.readouterr()
    return code, out.out + out.err


PYNATIVE = {"mode": "pynative", "data_format": "bin"}  # no graph compilation: quick in-process runs


def step_features(tr: Trainer, step: int) -> dict[str, np.ndarray]:
    """The features of ``step``'s (0-based) only micro-batch, as the loader builds them."""
    raw = next(tr.source.step_batches(0, step, 1, tr.global_batch, tr.cfg.train.batch_size))
    return tr.inputs.features(raw)


def test_grad_norm_spike_policies_stop_skip_and_warn(tmp_path: Path, data: Path) -> None:
    """A norm above factor x the running median: stop (exit with the step, update not applied), skip
    (update not applied, batch consumed), warn (applied). The history comes from the checkpoint;
    here it is rewritten 100x smaller, so the next real norm is a spike."""
    over = {
        "train": {"steps": 8, **PYNATIVE},
        "checkpoint": {"save_interval": 2},
        "monitor": {"grad_norm_spike": {"policy": "stop", "factor": 5.0, "window": 4, "min_history": 2}},
    }
    first = make_trainer(data, tmp_path / "s", over).fit(stop_at=2)
    assert not any(r["grad_norm_spike"] for r in first)
    state_path = tmp_path / "s" / "checkpoints" / "rank_0" / "step_00000002" / "state.json"
    state = json.loads(state_path.read_text())
    assert state["grad_norm_history"] == [r["grad_norm"] for r in first]
    state["grad_norm_history"] = [g / 100 for g in state["grad_norm_history"]]
    state_path.write_text(json.dumps(state))
    lines: list[str] = []
    tr = make_trainer(data, tmp_path / "s", over)
    tr.log = lines.append
    with pytest.raises(TrainingError, match=r"step 3: gradient norm .* > 5 x the median .* policy stop"):
        tr.fit(resume="auto")
    last = read_metrics(tmp_path / "s" / "metrics.jsonl")[-1]
    assert last["step"] == 3 and last["grad_norm_spike"] and last["skip_reason"] == "grad_norm_spike"
    import mindspore as ms

    saved = ms.load_checkpoint(str(state_path.parent / "train.ckpt"))
    assert all(np.array_equal(saved[p.name].asnumpy(), p.asnumpy()) for p in tr.params), "update applied"
    assert tr.updates == 2
    f = step_features(tr, 3)
    tr.spike.policy = "skip"
    before = params_of(tr)
    r = tr.train_step([f])
    assert r["spike"] and r["skipped"] and r["skip_reason"] == "grad_norm_spike" and tr.updates == 2
    assert all(np.array_equal(before[n], v) for n, v in params_of(tr).items())
    tr.spike.policy = "warn"
    r = tr.train_step([f])
    assert r["spike"] and not r["skipped"] and tr.updates == 3
    assert not all(np.array_equal(before[n], v) for n, v in params_of(tr).items())


class FakeClock:
    """Seconds that pass only when a test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_throughput_counts_loss_tokens_flops_memory_and_the_data_wait_alarm(
    tmp_path: Path, data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loss tokens (not padding, not masked labels) vs all positions; first step apart; model FLOP/s
    and MFU from the config; peak RSS; the data-wait share and its alarm, on an injected clock:
    every step computes for 0.4 s and waits ``wait`` s for its batches."""
    from pretrain.data import StepLoader
    from pretrain.monitor import flops_per_token

    clock = FakeClock()
    waits = {"s": 0.0}
    take = StepLoader._next_item

    def waited(self: StepLoader) -> Any:
        clock.now += waits["s"]
        return take(self)

    monkeypatch.setattr(StepLoader, "_next_item", waited)
    over = {
        "train": {"steps": 6, "mask_cross_document_label": True, "data_format": "bin"},
        "monitor": {"peak_flops": 1.0e9, "data_wait_alarm": 0.5},
    }
    tr = make_trainer(data, tmp_path / "t", over)
    tr.clock = clock
    step = tr.train_step

    def computed(micro: list[dict[str, np.ndarray]]) -> dict[str, Any]:
        clock.now += 0.4
        return step(micro)

    tr.train_step = computed  # type: ignore[method-assign]
    lines: list[str] = []
    tr.log = lines.append
    waits["s"] = 0.6  # 60% of each 1 s step: above the alarm at 50%
    records = tr.fit()
    first, rest = records[0], records[1:]
    assert first["tokens_per_s"] is None and first["model_flops_per_s"] is None and first["mfu"] is None
    assert first["first_step_s"] == first["step_time"] == pytest.approx(1.0)
    assert any("step 1:" in ln and "including graph compilation" in ln for ln in lines)
    positions = tr.global_batch * tr.model_cfg.seq_length
    fpt = flops_per_token(tr.model_cfg)
    for i, r in enumerate(records):
        f = step_features(tr, i)
        assert r["tokens"] == f["loss_mask"].sum() < positions  # cross-document labels are not counted
        assert r["step_time"] == pytest.approx(1.0) and r["data_wait_share"] == pytest.approx(0.6)
    for r in rest:
        assert r["tokens_per_s"] == pytest.approx(r["tokens"])  # per 1 s step
        assert r["total_tokens_per_s"] == pytest.approx(positions)
        assert r["model_flops_per_s"] == pytest.approx(fpt * positions)
        assert r["mfu"] == pytest.approx(r["model_flops_per_s"] / 1.0e9)
        assert r["peak_rss_mb"] > 100 and "device_peak_mb" not in r  # CPU: MindSpore reports no device memory
    # the first step (graph compilation) never raises the alarm; every later one does
    assert [r["data_wait_alarm"] for r in records] == [False] + [True] * 5
    assert any(ln.startswith("warning: waiting for data took 60% of step time") for ln in lines)
    summary = next(ln for ln in lines if ln.startswith("throughput over steps 2..6"))
    assert (
        "data wait 60.0% of step time (ALARM)" in summary and "MFU" in summary and "model FLOP/s" in summary
    )

    waits["s"] = 0.1  # 0.1 s of each 0.5 s step (20%): below the alarm
    lines.clear()
    records = tr.fit(overwrite=True)
    assert all(r["step_time"] == pytest.approx(0.5) for r in records)
    assert all(r["data_wait_share"] == pytest.approx(0.2) for r in records)
    assert not any(r["data_wait_alarm"] for r in records)
    assert not any(ln.startswith("warning: waiting for data") for ln in lines)
    summary = next(ln for ln in lines if ln.startswith("throughput over steps 2..6"))
    assert "data wait 20.0% of step time;" in summary


def test_rerun_without_resume_refuses_and_overwrite_starts_over(
    tmp_path: Path, data: Path, capsys: pytest.CaptureFixture
) -> None:
    cfg = merged(TINY, {"train": {"steps": 2, **PYNATIVE}})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "o"
    argv = ["--config", str(path), "--data", str(data), "--output", str(out)]
    assert cli(argv, capsys)[0] == 0
    metrics = (out / "metrics.jsonl").read_bytes()
    code, text = cli(argv, capsys)
    assert code == 2 and len(text.strip().splitlines()) == 1
    assert "already holds a run" in text and "step_00000002" in text and "metrics.jsonl (2 records)" in text
    assert "--resume auto" in text and "--overwrite" in text and "new --output" in text
    assert (out / "metrics.jsonl").read_bytes() == metrics  # untouched
    assert cli([*argv, "--resume", "auto", "--overwrite"], capsys)[0] == 2
    code, text = cli([*argv, "--overwrite"], capsys)
    assert code == 0 and "--overwrite: deleted" in text
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2]


def test_accumulated_micro_batches_equal_one_batch(tmp_path: Path, data: Path) -> None:
    one = make_trainer(data, tmp_path / "a", {"train": {"steps": 3, "batch_size": 4, "data_format": "bin"}})
    acc = make_trainer(
        data,
        tmp_path / "b",
        {"train": {"steps": 3, "batch_size": 1, "grad_accumulation_steps": 4, "data_format": "bin"}},
    )
    ra, rb = one.fit(), acc.fit()
    np.testing.assert_allclose([r["loss"] for r in ra], [r["loss"] for r in rb], rtol=1e-5)
    np.testing.assert_allclose([r["grad_norm"] for r in ra], [r["grad_norm"] for r in rb], rtol=1e-4)
    pa, pb = params_of(one), params_of(acc)
    for name in pa:
        np.testing.assert_allclose(pa[name], pb[name], atol=1e-5, err_msg=name)


def test_fp16_overflow_skips_the_update_and_lowers_the_scale(tmp_path: Path, data: Path) -> None:
    tr = make_trainer(
        data,
        tmp_path / "o",
        {
            "train": {
                "steps": 6,
                "amp_level": "O2",
                "data_format": "bin",
                "loss_scale": {"init": 2.0**40, "factor": 2.0**10},
            }
        },
    )
    lines: list[str] = []
    tr.log = lines.append
    before = params_of(tr)
    tr.updates = 0
    raw = next(tr.source.step_batches(0, 0, 1, 4, 4))
    from pretrain.data import row_features

    f = row_features(raw["input_ids"], raw["actual_seq_len"], None, tr.eos_id, tr.pad_id)
    r = tr.train_step([f])
    assert r["skipped"] and r["grad_norm"] is None and r["loss_scale"] == 2.0**40
    assert tr.loss_scale.value == 2.0**30 and tr.updates == 0
    after = params_of(tr)
    assert all(np.array_equal(before[n], after[n]) for n in before), "a skipped step changed parameters"
    assert int(tr.opt.global_step.asnumpy().reshape(-1)[0]) == 0
    records = tr.fit()  # from scratch: overflows are logged, then the scale comes down and updates happen
    skipped = [x["step"] for x in records if x["skipped"]]
    assert skipped and skipped == list(range(1, len(skipped) + 1)) and len(skipped) < 6
    assert any("gradient overflow" in ln and "update skipped" in ln for ln in lines)
    assert not records[-1]["skipped"] and records[-1]["loss_scale"] < 2.0**40


def test_non_finite_loss_stops_with_the_step_and_grad_norms(tmp_path: Path, data: Path) -> None:
    tr = make_trainer(
        data,
        tmp_path / "n",
        {
            "train": {"steps": 6, "grad_clip": 0.0, "data_format": "bin"},
            "lr_schedule": {"learning_rate": 1e30, "warmup_steps": 0, "type": "constant"},
        },
    )
    with pytest.raises(
        TrainingError,
        match=r"step [2-6]: (loss is (nan|inf)|gradients are not finite); "
        r"last grad norms \[",
    ) as err:
        tr.fit()
    assert "step 1:" not in str(err.value)


def test_checkpoints_keep_last_and_auto_resume_skips_a_corrupt_one(tmp_path: Path, data: Path) -> None:
    over = {
        "train": {"steps": 8, "data_format": "bin", "mode": "pynative"},
        "checkpoint": {"save_interval": 2, "keep_last": 2},
    }
    make_trainer(data, tmp_path / "c", over).fit(stop_at=6)
    root = tmp_path / "c" / "checkpoints" / "rank_0"
    assert [p.name for p in sorted(root.iterdir())] == ["step_00000004", "step_00000006"]  # step 2 pruned
    ckpt = root / "step_00000006" / "train.ckpt"
    blob = bytearray(ckpt.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    ckpt.write_bytes(bytes(blob))
    (root / ".tmp-step_00000008-123").mkdir()  # a save killed half-way
    lines: list[str] = []
    tr = make_trainer(data, tmp_path / "c", over)
    tr.log = lines.append
    records = tr.fit(resume="auto")
    assert any("skipping checkpoint" in ln and "corrupt" in ln for ln in lines)
    assert any("resume: step 4" in ln for ln in lines)
    assert [r["step"] for r in records] == [5, 6, 7, 8]
    assert [r["step"] for r in read_metrics(tmp_path / "c" / "metrics.jsonl")] == list(range(1, 9))
    # the first run's records past the resumed step are kept aside, not lost
    assert [r["step"] for r in read_metrics(tmp_path / "c" / "metrics.dropped.jsonl")] == [5, 6]
    assert any("2 records after step 4" in ln and "metrics.dropped.jsonl" in ln for ln in lines)


def test_resume_refuses_a_checkpoint_from_a_different_config(tmp_path: Path, data: Path) -> None:
    over = {"train": {"steps": 2, "data_format": "bin"}}
    make_trainer(data, tmp_path / "r", over).fit()
    tr = make_trainer(
        data, tmp_path / "r", merged(over, {"train": {"steps": 4, "data_format": "bin", "batch_size": 2}})
    )
    with pytest.raises(ConfigError, match=r"global batch of 4 rows .* this run has 2: the layout may change"):
        tr.fit(resume="auto")
    tr = make_trainer(data, tmp_path / "r", merged(over, {"lr_schedule": {"min_lr": 0.0}}))
    with pytest.raises(ConfigError, match=r"different run .*lr_schedule.min_lr: 0.001 -> 0.0"):
        tr.fit(resume="auto")


def test_cli_config_errors(tmp_path: Path, data: Path, capsys: pytest.CaptureFixture) -> None:
    def cfg_file(over: dict) -> str:
        p = tmp_path / f"c{len(list(tmp_path.iterdir()))}.yaml"
        p.write_text(yaml.safe_dump(merged(TINY, over)))
        return str(p)

    base = ["--data", str(data), "--output", str(tmp_path / "o")]
    code, text = cli(["--config", cfg_file({"model": {**TINY["model"], "seq_length": 32}}), *base], capsys)
    assert code == 2 and "model.seq_length = 32 but the data was prepared with seq_length = 16" in text
    code, text = cli(["--config", cfg_file({"model": {**TINY["model"], "vocab_size": 100}}), *base], capsys)
    assert code == 2 and "model.vocab_size = 100" in text
    code, text = cli(["--config", cfg_file({"parallel": {"data_parallel": 2}}), *base], capsys)
    assert code == 2 and "msrun --worker_num=2" in text
    code, text = cli(
        [
            "--config",
            cfg_file(
                {
                    "parallel": {
                        "data_parallel": 2,
                        "tensor_parallel": 2,
                        "pipeline_stages": 2,
                        "micro_batch_num": 2,
                    }
                }
            ),
            *base,
        ],
        capsys,
    )
    assert code == 2 and "need an Ascend or GPU backend" in text
    assert "rank    5: pp_stage 1, dp_rank 0, tp_rank 1 -> dataset shard 0 of 2" in text
    split = {
        "parallel": {"data_parallel": 1, "tensor_parallel": 4},
        "model": {**TINY["model"], "num_kv_heads": 2},
    }
    code, text = cli(["--config", cfg_file(split), *base], capsys)
    assert code == 2 and "num_kv_heads 2 must be divisible by tensor_parallel 4" in text
    code, text = cli(["--config", cfg_file({}), "--data", str(tmp_path / "nowhere")], capsys)
    assert code == 2 and "no manifest.json" in text


def test_show_layout(capsys: pytest.CaptureFixture) -> None:
    code, text = cli(["--show-layout", "8", "--tp", "2", "--pp", "2"], capsys)
    assert code == 0
    assert "world 8 = dp 2 x tp 2 x pp 2" in text
    assert "rank    3: pp_stage 0, dp_rank 1, tp_rank 1 -> dataset shard 1 of 2" in text


def test_overfit_check_passes_and_fails_as_it_should(
    tmp_path: Path, data: Path, capsys: pytest.CaptureFixture
) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(
        yaml.safe_dump(
            merged(
                TINY, {"overfit": {"rows": 2, "steps": 40, "max_loss": 1.0}, "train": {"data_format": "bin"}}
            )
        )
    )
    code, text = cli(
        ["--config", str(good), "--data", str(data), "--output", str(tmp_path / "g"), "--overfit-check"],
        capsys,
    )
    assert code == 0 and "overfit check PASSED" in text
    bad = tmp_path / "bad.yaml"  # a learning rate this small cannot memorise anything in 5 steps
    bad.write_text(
        yaml.safe_dump(
            merged(
                TINY,
                {
                    "overfit": {"rows": 2, "steps": 5, "max_loss": 1.0},
                    "lr_schedule": {"learning_rate": 1e-7},
                    "train": {"data_format": "bin", "mode": "pynative"},
                },
            )
        )
    )
    code, text = cli(
        ["--config", str(bad), "--data", str(data), "--output", str(tmp_path / "b"), "--overfit-check"],
        capsys,
    )
    assert code == 1 and "overfit check FAILED" in text


def test_recompute_gives_the_same_step(tmp_path: Path, data: Path) -> None:
    base = {"train": {"steps": 2, "data_format": "bin", "mode": "pynative"}}
    plain = make_trainer(data, tmp_path / "p", base).fit()
    again = make_trainer(
        data, tmp_path / "q", merged(base, {"model": {**TINY["model"], "recompute": True}})
    ).fit()
    np.testing.assert_allclose([r["loss"] for r in plain], [r["loss"] for r in again], rtol=1e-6)
