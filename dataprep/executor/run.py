"""The driver: ``prepare`` runs a recipe over the inputs into OUT, pass by pass.

Order of a run: make OUT ready (resume a compatible earlier run, or start over:
:mod:`dataprep.executor.outdir`), plan the input (on the executor's workers), ``setup`` every
stage, then per pass: run its tasks on the executor (skipping those with a completion marker),
and, when a global stage ends the pass, its ``decide`` once (skipped when its result is
recorded): :mod:`dataprep.executor.pass_loop`. Finally the outputs are assembled
(:mod:`dataprep.executor.finalize`), timings written and OUT/work emptied.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from dataprep import __version__
from dataprep.executor.base import Executor
from dataprep.executor.boot import plan_map, start_workers
from dataprep.executor.context import RunContext
from dataprep.executor.errors import NothingLeftError
from dataprep.executor.finalize import finalize
from dataprep.executor.merge import cpu_seconds
from dataprep.executor.outdir import (
    INPUTS_SHA256,
    check_request,
    clean_work,
    disk_use,
    input_sha256,
    prepare_out,
    remove_temporaries,
    run_lock,
)
from dataprep.executor.pass_loop import run_passes
from dataprep.executor.passes import COMPLETE, RunDir, plan_passes
from dataprep.executor.timing import PhaseClock
from dataprep.executors import make_executor
from dataprep.inputs import InputFile, expand_inputs, source_files
from dataprep.io import read_work_json, write_text_atomic, write_work_json
from dataprep.plan import Plan, gc_paused
from dataprep.planning import make_plan
from dataprep.progress import log
from dataprep.recipe import Recipe
from dataprep.stage.reader import ReadReport
from dataprep.stats import StageStats


def default_workers() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def plan_run(
    run: RunDir,
    files: list[InputFile],
    recipe: Recipe,
    executor: Executor,
    skipped: list[dict[str, str]] | None = None,
) -> tuple[Plan, StageStats, dict[str, list[dict[str, str]]]]:
    """(plan, its stats, its problem samples) of the run: made once, files planned and hashed in
    parallel on the ``executor`` (in this process when small: :func:`plan_map`), and kept in
    work/plan.json for resumed runs."""
    plan_file = run.work / "plan.json"
    if plan_file.exists():
        saved = read_work_json(plan_file)
        return Plan.from_json(saved["plan"]), StageStats.from_json(saved["stats"]), saved["samples"]
    stats = StageStats()
    report = ReadReport(stats, recipe.input["on_error"])
    scratch = run.work / "inputs"
    plan = make_plan(
        files,
        recipe,
        report,
        scratch,
        parallel_map=plan_map(executor, files),
        hash_files=True,
        skipped=skipped,
    )
    saved = {"plan": plan.to_json(), "stats": stats.to_json(), "samples": report.samples}
    write_work_json(plan_file, saved)
    return plan, stats, report.samples


def prepare(
    inputs: list[str],
    out: str | Path,
    recipe: Recipe,
    workers: int | None = None,
    keep_work: bool = False,
    quiet: bool = False,
    executor: str | Executor = "local",
    ray_address: str | None = None,
    overwrite: bool = False,
    resume_only: bool = False,
) -> dict[str, Any]:
    """Run ``recipe`` over ``inputs`` into ``out``; returns the stats written to stats.json.
    ``executor``: the name of a registered executor (:func:`dataprep.executors.make_executor`), or
    an :class:`Executor` to run on (closed at the end).
    A run that ends with no document left writes its outputs (stats.json, report.html, rejected/)
    and raises NothingLeftError, whose one line counts the documents read, the drops by reason
    (with where the largest reason's first drop came from) and says what to change.
    One run at a time holds OUT (:func:`~dataprep.executor.outdir.run_lock`); ``overwrite`` and
    ``resume_only``: see :func:`~dataprep.executor.outdir.prepare_out`."""
    check_request(inputs, out, recipe)
    with run_lock(Path(out).resolve()):
        try:
            return _prepare(
                inputs, out, recipe, workers, keep_work, quiet, executor, ray_address, overwrite, resume_only
            )
        except BaseException:  # a failed run (a full disk included) leaves no half-written file
            remove_temporaries(RunDir(Path(out).resolve()))
            raise


def _prepare(
    inputs: list[str],
    out: str | Path,
    recipe: Recipe,
    workers: int | None,
    keep_work: bool,
    quiet: bool,
    executor: str | Executor,
    ray_address: str | None,
    overwrite: bool,
    resume_only: bool,
) -> dict[str, Any]:
    started = time.monotonic()
    clock = PhaseClock()
    begun = clock.start()
    run = RunDir(Path(out).resolve())
    skipped: list[dict[str, str]] = []
    with gc_paused():
        if recipe.sources:
            files = source_files(recipe, exclude=run.out, skipped=skipped)
        else:
            files = expand_inputs(inputs, exclude=run.out, skipped=skipped)
    workers = workers or default_workers()
    fingerprint = {
        "version": __version__,
        "recipe_hash": recipe.hash(),
        "inputs": Plan(files, []).fingerprint(),
    }
    resumed = prepare_out(run, fingerprint, overwrite, resume_only)
    if resumed and (run.work / COMPLETE).exists() and (run.out / "stats.json").exists():
        if not keep_work:  # a run stopped between its completion and its clean-up
            clean_work(run)
        if not quiet:
            log(f"{run.out}: this run is already complete (same recipe, seed and inputs); nothing to do")
        return _succeeded(json.loads((run.out / "stats.json").read_text(encoding="utf-8")), run.out)
    if resumed and not quiet:
        log(f"resuming the run in {run.out} (completed work is kept)")
    state_file = run.work / "run.json"
    started_id = json.loads(state_file.read_text()).get("started", "") if resumed else uuid.uuid4().hex
    write_text_atomic(
        state_file,
        json.dumps(
            {**fingerprint, "started": started_id, "recipe": recipe.resolved()}, ensure_ascii=False, indent=1
        ),
    )
    runner = make_executor(executor, workers, ray_address) if isinstance(executor, str) else executor
    with runner:
        start_workers(runner, workers)
        with gc_paused():
            plan, plan_stats, plan_samples = plan_run(run, files, recipe, runner, skipped)
        if not quiet:
            for note in plan.file_notes:
                kind = "note" if note["kind"] == "unsupported" else "warning"
                log(f"{kind}: {note['file']}: {note['message']}")
        stages = [spec.build() for spec in recipe.stages]
        ctx = RunContext(
            run=run,
            recipe=recipe,
            files=files,
            plan=plan,
            plan_stats=plan_stats,
            plan_samples=plan_samples,
            stages=stages,
            labels=[spec.label for spec in recipe.stages],
            passes=plan_passes(stages),
            executor=runner,
            clock=clock,
            workers=workers,
            quiet=quiet,
            keep_work=keep_work,
        )
        if recipe.sources:  # what the pack stage mixes by (sources in recipe order: their ids)
            ctx.artifacts["sources"] = {
                "sources": [s.to_json() for s in recipe.sources],
                "mix": dataclasses.asdict(recipe.mix) if recipe.mix else {},
            }
        clock.stop("plan", begun)
        clock.executor = runner
        ran, drawn = run_passes(ctx)
        clock.executor = None  # its workers are reaped on leaving: their CPU moves to os.times()
    stopped = ran is not ctx.passes
    task_cpu = cpu_seconds(run, ran, ctx.task_ids)
    t0 = clock.start()
    ctx.input_sha256 = input_sha256(run, plan)
    write_work_json(run.work / INPUTS_SHA256, ctx.input_sha256)
    stats = finalize(ctx, ran, drawn, stopped)
    clock.stop("finalize", t0)
    ctx.peak_out_bytes = max(ctx.peak_out_bytes, disk_use(run.out))
    total = time.monotonic() - started
    _write_timings(ctx, total, task_cpu)
    write_text_atomic(run.work / COMPLETE, "{}")
    if not keep_work:
        clean_work(run)
    if not quiet and "outcome" not in stats:
        _summary(stats, run.out, total)
    return _succeeded(stats, run.out)


def _write_timings(ctx: RunContext, total: float, task_cpu: dict[str, float]) -> None:
    clock = ctx.clock
    timings = {
        "workers": ctx.workers,
        "seconds": {k: round(v, 3) for k, v in {**clock.seconds, "total": total}.items()},
        "cpu_seconds": {k: round(v, 2) for k, v in {**clock.cpu, "total": sum(clock.cpu.values())}.items()},
        "driver_cpu_seconds": {
            k: round(v, 2) for k, v in {**clock.driver_cpu, "total": sum(clock.driver_cpu.values())}.items()
        },
        "task_cpu_seconds": task_cpu,
        "peak_out_bytes": ctx.peak_out_bytes,  # disk use of OUT after every pass, decide and finalize
    }
    write_text_atomic(ctx.run.out / "timings.json", json.dumps(timings, indent=1))


def _succeeded(stats: dict[str, Any], out: Path) -> dict[str, Any]:
    """``stats``, unless the run in ``out`` left no document: then NothingLeftError with its line."""
    if "outcome" in stats:
        raise NothingLeftError(f"{stats['outcome']['message']}; see {out}/report.html")
    return stats


def _summary(stats: dict[str, Any], out: Path, seconds: float) -> None:
    t = stats["totals"]
    log(f"done in {seconds:.1f}s: {t['docs_in']} documents read, {t['kept']} kept, {t['dropped']} dropped")
    for key, n in t["dropped_by_reason"].items():
        log(f"  dropped {n:>8}  {key}")
    problems = stats["input"]["problems"]
    bad = {k: v for k, v in problems.items() if k not in ("files.read",)}
    if bad:
        log("input problems: " + ", ".join(f"{k}={v}" for k, v in bad.items()))
        for kind, items in stats["input"]["problem_samples"].items():
            for item in items[:3]:
                log(f"  {kind}: {item['where']}: {item['message']}")
    log(f"outputs in {out}: manifest.json, stats.json, report.html")
