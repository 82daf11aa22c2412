"""What a run reports: one record per step in metrics.jsonl (loss, lr, gradient norm and spikes,
loss-token and all-position throughput, model FLOP/s and MFU, data-wait share with its alarm,
memory, loss scale, skipped updates, the loss per source), the log lines, the throughput summary,
loss.png, and run.json (pretrain/record.py). Also the output directory's guard: an earlier run's
checkpoints or metrics are not overwritten unless asked, and records past the checkpoint a run
resumes from move to metrics.dropped.jsonl.

The first step of a process includes graph compilation: its time is reported as ``first_step_s``
and left out of throughput.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np

from pretrain.monitor import SpikeDetector, device_peak_mb, peak_rss_mb


class TrainingError(RuntimeError):
    """Training cannot go on (non-finite loss, persistent overflow); the message names the step."""


def dropped_path(metrics_path: Path) -> Path:
    return metrics_path.with_name(metrics_path.stem + ".dropped.jsonl")


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in Path(path).read_text(encoding="utf-8").splitlines() if ln.strip()]


class StepMetrics:
    """The records of one ``fit``: built from each step's result and the clock, checked (non-finite
    loss, overflows, spikes), written to ``out`` (metrics.jsonl, one JSON line per record) and
    logged. ``positions``: all token positions of a global batch; ``world``: ranks (for MFU)."""

    def __init__(
        self,
        out: IO[str],
        spike: SpikeDetector,
        loss_scale: Any,
        log: Callable[[str], None],
        *,
        positions: int,
        flops_per_token: float,
        world: int,
        device: str,
        data_wait_alarm: float,
        peak_flops: float | None,
        log_interval: int,
        max_consecutive_overflows: int,
    ):
        self.out, self.spike, self.loss_scale, self.log = out, spike, loss_scale, log
        self.positions, self.flops_per_token, self.world, self.device = (
            positions,
            flops_per_token,
            world,
            device,
        )
        self.alarm, self.peak = float(data_wait_alarm), peak_flops
        self.log_interval, self.max_overflows = log_interval, max_consecutive_overflows
        self.records: list[dict[str, Any]] = []
        self.norms: list[float | None] = []  # the last five gradient norms, for error messages
        self.overflows = 0  # consecutive overflow steps

    def step(
        self,
        step: int,
        r: dict[str, Any],
        *,
        first: bool,
        last: bool,
        step_time: float,
        wait: float,
        tokens_seen: float,
        epoch: int,
        samples: int,
        micro: list[dict[str, np.ndarray]],
        by_source: dict[str, float | None] | None,
    ) -> dict[str, Any]:
        """Record step ``step`` (result ``r`` of the train step; ``first``: includes graph
        compilation; ``wait``: seconds of ``step_time`` spent waiting for data). Raises
        TrainingError on a non-finite loss without loss scaling, too many overflows in a row, or a
        spike under policy stop."""
        dt, positions = step_time, self.positions
        share = wait / dt if dt > 0 else 0.0
        self.norms = [*self.norms[-4:], r["grad_norm"]]
        rec: dict[str, Any] = {
            "step": step,
            "loss": r["loss"],
            "lr": r["lr"],
            "grad_norm": r["grad_norm"],
            "grad_norm_median": self.spike.median(),
            "grad_norm_spike": r["spike"],
            "loss_scale": r["loss_scale"],
            "skipped": r["skipped"],
            "skip_reason": r["skip_reason"],
            "step_time": dt,
            "data_wait_share": share,
            "data_wait_alarm": (not first) and share > self.alarm,
            "tokens": r["tokens"],
            "tokens_seen": tokens_seen,
            "tokens_per_s": None if first else r["tokens"] / dt,
            "total_tokens_per_s": None if first else positions / dt,
            "model_flops_per_s": None if first else self.flops_per_token * positions / dt,
            "peak_rss_mb": peak_rss_mb(),
            "epoch": epoch,
            "samples": samples,
            # this rank's samples of the step (blend sample ids, or row ids)
            "sample_ids": np.concatenate([f["row_ids"] for f in micro]).tolist()
            if all("row_ids" in f for f in micro)
            else None,
        }
        if by_source is not None:
            rec["loss_by_source"] = by_source
        if self.peak:
            rec["mfu"] = None if first else rec["model_flops_per_s"] / (float(self.peak) * self.world)
        device_mb = device_peak_mb(self.device)
        if device_mb is not None:
            rec["device_peak_mb"] = device_mb
        if first:
            rec["first_step_s"] = dt
        self._check(step, r)
        self.records.append(rec)
        self.write(rec)
        if r["spike"]:
            self._report_spike(step, r)
        if first:
            self.log(f"step {step}: {dt:.2f} s including graph compilation (left out of throughput)")
        if step % self.log_interval == 0 or last:
            self._log_step(step, r, rec, self.records[-self.log_interval :])
        return rec

    def write(self, rec: dict[str, Any]) -> None:
        self.out.write(json.dumps(rec) + "\n")
        self.out.flush()

    def _check(self, step: int, r: dict[str, Any]) -> None:
        nonfinite = not math.isfinite(r["loss"])
        overflow = r["skip_reason"] == "overflow"
        if (nonfinite or overflow) and not self.loss_scale.enabled:
            what = f"loss is {r['loss']}" if nonfinite else "gradients are not finite"
            raise TrainingError(
                f"step {step}: {what}; last grad norms {self.norms}. "
                "Check the data (ids < vocab_size?), lower lr_schedule.learning_rate, or run "
                "with train.amp_level O0 to rule out float16 overflow."
            )
        if not overflow:
            self.overflows = 0
            return
        self.overflows += 1
        self.log(
            f"step {step}: gradient overflow at loss scale {r['loss_scale']:g}, "
            f"update skipped, scale now {self.loss_scale.value:g}"
        )
        if self.overflows > self.max_overflows:
            raise TrainingError(
                f"step {step}: {self.overflows} consecutive overflow steps (loss scale "
                f"{self.loss_scale.value:g}); last grad norms {self.norms}; the run diverged"
            )

    def _report_spike(self, step: int, r: dict[str, Any]) -> None:
        s = self.spike
        what = (
            f"step {step}: gradient norm {r['grad_norm']:.4g} > {s.factor:g} x the median of the last "
            f"{len(s.history)} applied steps (threshold {r['spike_threshold']:.4g}, "
            "monitor.grad_norm_spike)"
        )
        if s.policy == "stop":
            raise TrainingError(
                what
                + "; policy stop: the update was not applied and the run stops. Inspect the batch of this "
                "step, lower the learning rate, then resume from the last checkpoint"
            )
        if s.policy == "skip":
            self.log(what + "; policy skip: update not applied, the batch is consumed")
        else:
            self.log(what + "; policy warn: update applied")

    def _log_step(
        self, step: int, r: dict[str, Any], rec: dict[str, Any], window: list[dict[str, Any]]
    ) -> None:
        gn = "skip" if r["grad_norm"] is None else f"{r['grad_norm']:.3f}"
        recent = [x["loss"] for x in window]
        avg = f" (mean {sum(recent) / len(recent):.4f})" if len(recent) > 1 else ""
        rate = (
            f"{rec['tokens_per_s']:,.0f} tok/s ({rec['total_tokens_per_s']:,.0f} with padding)"
            if rec["tokens_per_s"] is not None
            else "compiling"
        )
        self.log(
            f"step {step:>6} | loss {r['loss']:.4f}{avg} | lr {r['lr']:.3e} | grad_norm {gn} | {rate} | "
            f"data wait {100 * rec['data_wait_share']:.1f}%"
            + (f" | scale {r['loss_scale']:g}" if self.loss_scale.enabled else "")
        )
        timed = [x for x in window if x["tokens_per_s"] is not None]
        busy = sum(x["step_time"] for x in timed)
        share = sum(x["data_wait_share"] * x["step_time"] for x in timed) / busy if busy else 0.0
        if share > self.alarm:
            self.log(
                f"warning: waiting for data took {100 * share:.0f}% of step time over steps "
                f"{timed[0]['step']}..{timed[-1]['step']} (alarm above {100 * self.alarm:.0f}%, "
                "monitor.data_wait_alarm): the loader does not keep up; raise train.prefetch, check the "
                "storage, or prefer .bin shards"
            )

    def eval(self, step: int, ev: dict[str, Any]) -> None:
        """Write and log an eval record of ``step``."""
        self.write({"step": step, **ev})
        self.log(f"eval  {step:>6} | loss {ev['eval_loss']:.4f} | ppl {ev['eval_ppl']:.2f}")

    def summary(self) -> None:
        """Log the throughput over the steps timed (all but a process's first)."""
        records = self.records
        timed = [x for x in records if x["tokens_per_s"] is not None]
        if not timed:
            return
        busy = sum(x["step_time"] for x in timed)
        tokens = sum(x["tokens"] for x in timed)
        positions = self.positions * len(timed)
        flops = self.flops_per_token * positions / busy
        share = sum(x["data_wait_share"] * x["step_time"] for x in timed) / busy
        mfu = f", MFU {100 * flops / (float(self.peak) * self.world):.2f}%" if self.peak else ""
        device = (
            f", device peak {records[-1]['device_peak_mb']:,.0f} MB"
            if "device_peak_mb" in records[-1]
            else ""
        )
        self.log(
            f"throughput over steps {timed[0]['step']}..{timed[-1]['step']}: "
            f"{tokens / busy:,.0f} loss tokens/s, {positions / busy:,.0f} positions/s, "
            f"{flops:.3g} model FLOP/s{mfu}; data wait "
            f"{100 * share:.1f}% of step time{' (ALARM)' if share > self.alarm else ''}; peak RSS "
            f"{records[-1]['peak_rss_mb']:,.0f} MB{device}"
        )


def claim_output(
    output: Path,
    ckpt_root: Path,
    metrics_path: Path,
    resume: str | None,
    overwrite: bool,
    sum_over_ranks: Callable[[list[float]], np.ndarray],
    log: Callable[[str], None],
) -> None:
    """Refuse to start over an earlier run's checkpoints or metrics unless resuming or told to
    overwrite (then delete them, saying so). Collective: all ranks refuse together."""
    from pretrain import checkpoint as ckpt

    found = []
    steps = [p.name for p in ckpt.list_checkpoints(ckpt_root, validate=False)]
    if steps:
        found.append(f"checkpoints in {ckpt_root} ({', '.join(steps[-3:])})")
    if metrics_path.exists() and metrics_path.stat().st_size:
        n = sum(1 for ln in metrics_path.read_text(encoding="utf-8").splitlines() if ln.strip())
        found.append(f"{metrics_path} ({n} records)")
    anywhere = sum_over_ranks([float(bool(found))])[0] > 0
    if resume or not anywhere:
        return
    if overwrite:
        for what in (ckpt_root, metrics_path, dropped_path(metrics_path)):
            if what.is_dir():
                shutil.rmtree(what)
                log(f"--overwrite: deleted {what}")
            elif what.exists():
                what.unlink()
                log(f"--overwrite: deleted {what}")
        return
    from pretrain.config import ConfigError

    raise ConfigError(
        f"--output {output} already holds a run ({'; '.join(found) or 'on another rank'}): continue "
        "it with --resume auto, or start over with --overwrite (deletes them) or a new --output"
    )


def truncate_metrics(path: Path, step: int, log: Callable[[str], None]) -> None:
    """Keep the records up to ``step``; those after it (from a run that went further than the
    checkpoint resumed) move to <name>.dropped.jsonl, never silently lost."""
    if not path.exists():
        return
    keep, drop = [], []
    for ln in path.read_text(encoding="utf-8").splitlines():
        if ln.strip():
            (keep if json.loads(ln)["step"] <= step else drop).append(ln)
    if not drop:
        return
    with open(dropped_path(path), "a", encoding="utf-8") as f:
        f.write("".join(d + "\n" for d in drop))
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(k + "\n" for k in keep), encoding="utf-8")
    os.replace(tmp, path)
    log(
        f"metrics: {len(drop)} records after step {step} (the run went past its last checkpoint) "
        f"moved to {dropped_path(path)}"
    )


def plot_metrics(metrics_path: Path, png: Path) -> None:
    """Loss curve (train loss per step, eval loss points) as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = read_metrics(metrics_path) if metrics_path.exists() else []
    train = [(r["step"], r["loss"]) for r in recs if "loss" in r and r["loss"] is not None]
    evals = [(r["step"], r["eval_loss"]) for r in recs if "eval_loss" in r]
    if not train:
        return
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    steps, values = (np.asarray(v, dtype=float) for v in zip(*train, strict=True))
    ax.plot(steps, values, label="train loss", linewidth=0.8, alpha=0.45)
    window = max(1, min(50, len(values) // 10))
    if window > 1:
        smooth = np.convolve(values, np.ones(window) / window, mode="valid")
        ax.plot(steps[window - 1 :], smooth, label=f"train loss, mean of {window} steps", linewidth=1.6)
    if evals:
        ax.plot(*zip(*evals, strict=True), "o-", label="eval loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/token)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)


def write_run(
    output: Path,
    data: Any,
    config: dict[str, Any],
    metrics_path: Path,
    *,
    step: int,
    samples: int,
    tokens_seen: float,
    seconds: float,
    stopped: bool,
    final_checkpoint: Path,
) -> None:
    """run.json (pretrain/record.py) of a run as it stands after ``step``; ``data``: its
    :class:`pretrain.inputs.TrainingData`; ``final_checkpoint``: recorded when it exists."""
    from pretrain.blend import DataEntry
    from pretrain.record import code_version, manifest_identity, write_run_record

    entries = data.entries or [DataEntry(str(data.data), 1.0, data.data.name)]
    counts = data.blend.samples_per_dataset() if data.blend is not None else [data.source.total_rows]
    sources = []
    tokenizer: dict[str, Any] = {}
    for entry, split, n in zip(entries, data.splits, counts, strict=True):
        ident = manifest_identity(split.out)
        tokenizer = tokenizer or ident.pop("tokenizer")
        ident.pop("tokenizer", None)
        sources.append(
            {
                "path": entry.path,
                "name": entry.name,
                "weight": entry.weight,
                "rows": split.rows,
                "samples_in_blend": n,
                **ident,
            }
        )
    write_run_record(
        output,
        {
            "status": "stopped" if stopped else "done",
            "config": config,
            "data": sources,
            "tokenizer": tokenizer,
            "code_version": code_version(),
            "metrics_file": metrics_path.name,
            "steps": step,
            "samples": samples,
            "tokens_seen": tokens_seen,
            "sources": data.labels,
            "wall_time_s": seconds,
            "final_checkpoint": str(final_checkpoint) if final_checkpoint.exists() else None,
        },
    )
