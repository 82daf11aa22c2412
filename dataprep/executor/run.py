"""The driver: ``prepare`` runs a recipe over the inputs into OUT, pass by pass.

Order of a run: make OUT ready (resume a compatible earlier run, or start over), plan the input
(on the executor's workers), ``setup`` every stage, then per pass: run its tasks on the executor
(skipping those with a completion marker), and, when a global stage ends the pass, its
``decide`` once (skipped when its result is recorded). Finally the outputs are assembled
(:mod:`dataprep.executor.finalize`), timings written and OUT/work emptied.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from typing import Any

from dataprep import __version__
from dataprep.docstore import RejectedWriter, WorkMismatch, refused
from dataprep.document import texts_within_bytes
from dataprep.executor.base import Executor
from dataprep.executor.boot import plan_map, start_workers
from dataprep.executor.context import RunContext
from dataprep.executor.finalize import draw_ahead, finalize
from dataprep.executor.merge import cpu_seconds
from dataprep.executor.passes import (
    COMPLETE,
    DECIDE_TASK,
    OUTPUT_ENTRIES,
    OUTPUTS_RECORD,
    Pass,
    RunDir,
    plan_passes,
)
from dataprep.executor.sweep import remove_all
from dataprep.executor.task import check_marker, run_id, run_task
from dataprep.executor.timing import PhaseClock
from dataprep.executor.warmup import WarmUps
from dataprep.executors import make_executor
from dataprep.io import file_sha256, write_text_atomic
from dataprep.plan import InputFile, Plan, expand_inputs, input_holding, make_plan, source_files
from dataprep.progress import Progress
from dataprep.recipe import Recipe
from dataprep.stage.context import DriverContext
from dataprep.stage.protocol import GlobalStage, NothingLeft
from dataprep.stage.reader import ReadReport, read_task
from dataprep.stats import LENGTH_EDGES, Histogram, StageStats


class RunError(RuntimeError):
    """The run cannot go on; the message says what to do."""


class UsageError(RunError):
    """The command's INPUTs do not go with the recipe (both, or neither, name the inputs): the
    command line exits with its usage status."""


class NothingLeftError(RunError):
    """The run ended with no document left (its stats.json and report.html are written); the
    message counts the documents read and dropped by reason and says what to change."""


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


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
        saved = json.loads(plan_file.read_text())
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
    write_text_atomic(plan_file, json.dumps(saved))
    return plan, stats, report.samples


LOCK = ".lock"


@contextlib.contextmanager
def run_lock(out: Path) -> Iterator[None]:
    """Hold ``OUT/.lock`` (pid, host, start time) for the block: one run per OUT. A lock left by a
    process of this host that no longer exists is taken over; a live holder (or one on another
    host) makes this raise RunError naming it. The lock is removed on leaving, if still ours."""
    out.mkdir(parents=True, exist_ok=True)
    lock = out / LOCK
    host = socket.gethostname()
    mine = {"pid": os.getpid(), "host": host, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    staged = out / f".lock.{os.getpid()}"  # written whole, then linked: a lock is never seen empty
    staged.write_text(json.dumps(mine))
    try:
        for _ in range(2):
            try:
                os.link(staged, lock)
            except FileExistsError:
                try:
                    holder = json.loads(lock.read_text())
                except (OSError, ValueError):
                    holder = {}
                pid = holder.get("pid")
                if holder.get("host") == host and isinstance(pid, int) and not _alive(pid):
                    _log(f"{lock}: taking over the lock of process {pid}, which no longer runs")
                    lock.unlink(missing_ok=True)
                    continue
                raise RunError(
                    f"{lock}: another run is writing into {out} (pid {holder.get('pid')} on "
                    f"{holder.get('host')}, since {holder.get('started')}); wait for it to end, or "
                    "remove the lock if that process is gone"
                ) from None
            break
        else:
            raise RunError(f"{lock}: could not take the lock of {out}; another run keeps taking it over")
    finally:
        staged.unlink(missing_ok=True)
    try:
        yield
    finally:
        try:
            if json.loads(lock.read_text()).get("pid") == os.getpid():
                lock.unlink()
        except (OSError, ValueError):
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _recorded_outputs(run: RunDir) -> set[str]:
    """The entries of OUT that the previous run there recorded as its own."""
    record = run.work / OUTPUTS_RECORD
    try:
        names = json.loads(record.read_text())
    except (OSError, ValueError):
        return set()
    return {n for n in names if n in OUTPUT_ENTRIES}  # never more than dataprep's own names


INPUTS_SHA256 = "inputs_sha256.json"  # in OUT/work once complete: {rel: sha256} of every input


def changed_inputs(run: RunDir) -> list[str]:
    """Input files (their ``rel``) whose content differs from what the run in OUT trusts of them
    (whatever their size and time), or which are gone. Read and compared: after a complete run,
    every input whole (work/inputs_sha256.json); else the files planning hashed whole
    (``Plan.sha256``) and every byte range that a completed pass-0 task read (its
    :meth:`RunDir.input_hashes`), and nothing else: a range no completed task read is checked
    by the task that reads it (:class:`InputChanged`, recorded by :meth:`RunDir.changed`)."""
    plan_file = run.work / "plan.json"
    if not plan_file.exists():
        return []
    changed: dict[str, None] = {}
    for record in sorted((run.work / "changed").glob("*.json")):
        with contextlib.suppress(OSError, ValueError, KeyError):
            changed[json.loads(record.read_text())["file"]] = None
    plan = Plan.from_json(json.loads(plan_file.read_text())["plan"])
    ranges: list[tuple[str, str, int, int, str | None]] = []  # (rel, path, start, end, sha256)
    complete = run.work / INPUTS_SHA256
    if (run.work / COMPLETE).exists() and complete.exists():
        recorded = json.loads(complete.read_text())
        ranges = [(f.rel, f.path, 0, -1, recorded.get(f.rel)) for f in plan.files]
    else:
        ranges = [(f.rel, f.path, 0, -1, plan.sha256[f.rel]) for f in plan.files if f.rel in plan.sha256]
        by_path = {f.path: f.rel for f in plan.files}
        for t in plan.task_ids:
            for path, start, end, digest in _read_ranges(run, t):
                if path in by_path:  # else a chunk of a decompressed file (in plan.sha256)
                    ranges.append((by_path[path], path, start, end, digest))
    for rel, path, start, end, digest in ranges:
        if rel in changed:
            continue
        try:
            now: str | None = file_sha256(path, start, end)
        except OSError:
            now = None
        if now != digest:
            changed[rel] = None
    return list(changed)


def _read_ranges(run: RunDir, task_id: str) -> list[list[Any]]:
    """The [path, start, end, sha256] input ranges a completed pass-0 task read ([] when the task
    has not completed), checked against the sha256 its marker records for the list."""
    marker = run.marker(0, task_id)
    if not marker.exists():
        return []
    recorded = json.loads(marker.read_text()).get("inputs_sha256")
    listing = run.input_hashes(task_id)
    try:
        data = listing.read_bytes()
    except OSError:
        data = b""
    if not isinstance(recorded, str) or hashlib.sha256(data).hexdigest() != recorded:
        raise refused(listing, "its sha256 differs from the one its completion marker records")
    return json.loads(data)


def input_sha256(run: RunDir, plan: Plan) -> dict[str, str | None]:
    """The sha256 of every input file as this run read it, by ``rel``: from planning
    (``Plan.sha256``, ``Plan.read_sha256``) or from the pass-0 task that read the file whole
    (a range [0, size)); None for a file nobody read."""
    out: dict[str, str | None] = {f.rel: None for f in plan.files}
    out.update(plan.read_sha256)
    out.update(plan.sha256)
    by_path = {f.path: f for f in plan.files}
    for t in plan.task_ids:
        for path, start, end, digest in _read_ranges(run, t):
            f = by_path.get(path)
            if f is not None and start == 0 and end == f.size:
                out[f.rel] = digest
    return out


def prepare_out(
    run: RunDir, fingerprint: dict[str, Any], overwrite: bool = False, resume_only: bool = False
) -> bool:
    """Make OUT ready; True when resuming a compatible earlier run. Starting over where an earlier
    run left work or outputs needs ``overwrite`` (else RunError listing what would go) and removes
    only what that run recorded as its own; ``resume_only`` refuses anything but resuming. An entry
    of OUT that no run recorded is never touched; one that carries a name of dataprep's outputs
    makes the run refuse (the outputs would replace it)."""
    state_file = run.work / "run.json"
    why = ""
    if state_file.exists():
        previous = json.loads(state_file.read_text())
        if {k: previous.get(k) for k in fingerprint} != fingerprint:
            why = "the recipe, seed or inputs (their sizes or times) changed since the last run there"
        else:
            try:
                changed = changed_inputs(run)
            except WorkMismatch as e:  # a listing of input hashes that its marker does not vouch for
                why = str(e).split(";", 1)[0]
            else:
                if not changed:
                    return True
                why = f"the content of {', '.join(changed[:3])} changed since the last run there (sha256)"
    ours = _recorded_outputs(run) if state_file.exists() else set()
    present = {p.name for p in run.out.iterdir()} if run.out.exists() else set()
    clashing = sorted(n for n in present & set(OUTPUT_ENTRIES) if n not in ours)
    if not state_file.exists():
        foreign = sorted(n for n in present if n not in ("work", ".final", LOCK))
        if foreign:
            raise RunError(
                f"{run.out} already holds files that dataprep did not write ({', '.join(foreign[:5])}); "
                "choose another --out"
            )
    elif clashing:
        raise RunError(
            f"{run.out} holds {', '.join(clashing)}, which the last run there did not write and this "
            "run's outputs would replace; move it away or choose another --out"
        )
    if why:
        if resume_only:
            raise RunError(f"{run.out}: {why}; not resuming (--resume-only); rerun without it to start over")
        doomed = sorted(ours | ({"work"} if run.work.exists() else set()) | ({".final"} & present))
        if not overwrite:
            raise RunError(
                f"{run.out}: {why}; starting over would delete {', '.join(doomed)}; "
                "rerun with --overwrite to do so, or choose another --out"
            )
        _log(f"{run.out}: {why}; starting over (deleting {', '.join(doomed)})")
        for name in doomed:
            path = run.out / name
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
    elif resume_only and not state_file.exists():
        raise RunError(f"{run.out}: no run to resume there (--resume-only)")
    shutil.rmtree(run.final, ignore_errors=True)
    run.work.mkdir(parents=True, exist_ok=True)
    return False


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
    One run at a time holds OUT (:func:`run_lock`); ``overwrite`` and ``resume_only``: see
    :func:`prepare_out`."""
    check_request(inputs, out, recipe)
    with run_lock(Path(out).resolve()):
        try:
            return _prepare(
                inputs, out, recipe, workers, keep_work, quiet, executor, ray_address, overwrite, resume_only
            )
        except BaseException:  # a failed run (a full disk included) leaves no half-written file
            remove_temporaries(RunDir(Path(out).resolve()))
            raise


def check_request(inputs: list[str], out: str | Path, recipe: Recipe) -> None:
    """RunError unless the run is well asked for: INPUTs xor the recipe's ``sources:``, OUT not a
    file and not inside an input. Checked before OUT is created or locked."""
    if recipe.sources and inputs:
        raise UsageError("the recipe lists its inputs under 'sources:'; give no INPUT")
    if not recipe.sources and not inputs:
        raise UsageError("give at least one INPUT (or a recipe with 'sources:')")
    resolved = Path(out).resolve()
    if resolved.exists() and not resolved.is_dir():
        raise RunError(f"--out {out} is a file, not a directory: give a directory (created when missing)")
    args = [a for s in recipe.sources for a in s.inputs] if recipe.sources else inputs
    holder = input_holding(resolved, args)
    if holder is not None:
        raise RunError(
            f"--out {out} is inside the input {holder}: give an output directory outside every input"
        )


_TEMPORARY = re.compile(r"^\..+\.tmp\d+$")  # how DocWriter, RejectedWriter and atomic_write name them


def remove_temporaries(run: RunDir) -> None:
    """Delete the half-written files of a stopped run: OUT/.final and every ``.NAME.tmpPID`` file
    under OUT/work (completed files, markers and the user's files are left alone)."""
    shutil.rmtree(run.final, ignore_errors=True)
    if not run.work.is_dir():
        return
    for root, _, names in os.walk(run.work):
        for name in names:
            if _TEMPORARY.match(name):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(root, name))


def disk_use(path: Path) -> int:
    """Bytes of disk the files under ``path`` occupy (allocated blocks; hard links counted once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


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
            _clean_work(run)
        if not quiet:
            _log(f"{run.out}: this run is already complete (same recipe, seed and inputs); nothing to do")
        return _succeeded(json.loads((run.out / "stats.json").read_text(encoding="utf-8")), run.out)
    if resumed and not quiet:
        _log(f"resuming the run in {run.out} (completed work is kept)")
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
        plan, plan_stats, plan_samples = plan_run(run, files, recipe, runner, skipped)
        if not quiet:
            for note in plan.file_notes:
                kind = "note" if note["kind"] == "unsupported" else "warning"
                _log(f"{kind}: {note['file']}: {note['message']}")
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
        ran, drawn = _run_passes(ctx)
        clock.executor = None  # its workers are reaped on leaving: their CPU moves to os.times()
    stopped = ran is not ctx.passes
    task_cpu = cpu_seconds(run, ran, ctx.task_ids)
    t0 = clock.start()
    ctx.input_sha256 = input_sha256(run, plan)
    write_text_atomic(run.work / INPUTS_SHA256, json.dumps(ctx.input_sha256))
    stats = finalize(ctx, ran, drawn, stopped)
    clock.stop("finalize", t0)
    ctx.peak_out_bytes = max(ctx.peak_out_bytes, disk_use(run.out))
    total = time.monotonic() - started
    _write_timings(ctx, total, task_cpu)
    write_text_atomic(run.work / COMPLETE, "{}")
    if not keep_work:
        _clean_work(run)
    if not quiet and "outcome" not in stats:
        _summary(stats, run.out, total)
    return _succeeded(stats, run.out)


def _clean_work(run: RunDir) -> None:
    """Empty OUT/work of the intermediates of a complete run: run.json, COMPLETE, plan.json, the
    inputs' sha256 and the record of the outputs stay (they make a rerun a no-op, show a changed
    input, and name what a later start over may delete)."""
    kept = ("run.json", COMPLETE, OUTPUTS_RECORD, "plan.json", INPUTS_SHA256)
    remove_all([entry for entry in run.work.iterdir() if entry.name not in kept])


def _run_passes(ctx: RunContext) -> tuple[list[Pass], dict[str, str] | None]:
    """Set every stage up, then run every pass and its decide. Returns (the passes that ran: all,
    or those up to the one whose decide found nothing left; the report's plots drawn ahead)."""
    run, clock = ctx.run, ctx.clock
    if ctx.executor.has_workers:
        warm_ups = WarmUps.on_pool(ctx.stages, ctx.executor.submit, ctx.workers)
    else:
        warm_ups = WarmUps.in_driver(ctx.stages)
    t0 = clock.start()
    for i, st in enumerate(ctx.stages):
        st.setup(_driver_context(ctx, warm_ups, i, ctx.driver_stats[ctx.labels[i]]))
    clock.stop("setup", t0)
    drawn: Future[dict[str, str]] | None = None  # report plots drawn by a worker during the last decide
    ran = ctx.passes
    for p in ctx.passes:
        for i in [p.apply, *p.maps]:
            if i is not None:
                ctx.stages[i].prepare_apply(
                    _driver_context(ctx, warm_ups, i, ctx.driver_stats[ctx.labels[i]])
                )
        write_text_atomic(run.work / "artifacts.json", json.dumps(ctx.artifacts, ensure_ascii=False))
        t0 = clock.start()
        undecided = p.compute is not None and not run.decided(p.index).exists()
        if undecided:
            deciding = ctx.stages[p.compute]  # type: ignore[index]
            assert isinstance(deciding, GlobalStage)
            stats = ctx.driver_stats[ctx.labels[p.compute]]  # type: ignore[index]
            deciding.prepare_decide(_driver_context(ctx, warm_ups, p.compute, stats))  # type: ignore[arg-type]
        after_pass = getattr(ctx.executor, "submit_after_pass", None)
        if (
            p is ctx.passes[-1]
            and p.compute is not None
            and after_pass is not None
            and ctx.executor.has_workers
        ):
            warm_ups.run_at_pass_end(p.compute - 1, after_pass)  # the last decide's (shard writers)
        _run_tasks(ctx, p)
        clock.stop(f"pass{p.index}", t0)
        ctx.peak_out_bytes = max(ctx.peak_out_bytes, disk_use(run.out))
        if p is ctx.passes[-1] and undecided:
            t0 = clock.start()
            drawn = draw_ahead(ctx)
            clock.stop("report.draw_ahead", t0)
        nothing_left = p.compute is not None and _decide(ctx, warm_ups, p).get("nothing_left")
        ctx.peak_out_bytes = max(ctx.peak_out_bytes, disk_use(run.out))
        if nothing_left:
            ran = ctx.passes[: p.index + 1]
            break
        if not ctx.keep_work:  # what the next pass no longer reads
            if p.index == 0:
                remove_all([run.work / "inputs"], ignore_errors=True)
            else:
                remove_all([run.pass_dir(p.index - 1) / "docs"], ignore_errors=True)
    plots = None
    if drawn is not None:
        t0 = clock.start()
        try:
            plots = drawn.result()
        except Exception:  # drawn again at the end, where a real problem shows itself
            plots = None
        clock.stop("report.draw_ahead", t0)
    return ran, plots


def _run_tasks(ctx: RunContext, p: Pass) -> None:
    """The tasks of pass ``p`` that have no completion marker yet, on the executor, with a
    progress bar (pass 0: by input bytes, longest task first; later passes: by documents)."""
    run, task_ids, plan = ctx.run, ctx.task_ids, ctx.plan
    todo = [i for i, t in enumerate(task_ids) if not run.marker(p.index, t).exists()]
    saved = json.loads((run.work / "run.json").read_text())
    expected = run_id(saved["recipe_hash"], saved["inputs"], saved.get("started", ""))
    pending = set(todo)
    for i, t in enumerate(task_ids):  # work kept from an earlier process must be this run's
        if i not in pending:
            check_marker(run.marker(p.index, t), expected)
    if not todo:
        return
    names = [ctx.labels[i] for i in [p.apply, *p.maps, p.compute] if i is not None]
    title = f"pass {p.index + 1}/{len(ctx.passes)}" + (f" ({' > '.join(names)})" if names else "")
    if p.index == 0:
        todo.sort(key=lambda i: -plan.tasks[i].nbytes)  # longest first
    prev_docs = (
        None
        if p.index == 0
        else sum(json.loads(run.marker(p.index - 1, t).read_text())["docs_written"] for t in task_ids)
    )
    bar = Progress(
        title,
        sum(t.nbytes for t in plan.tasks) if p.index == 0 else None,
        prev_docs,
        quiet=ctx.quiet,
        done_tasks=len(task_ids) - len(todo),
        total_tasks=len(task_ids),
    )
    with bar:
        ctx.executor.run_pass(partial(run_task, ctx.recipe, str(run.out), p.index), todo, bar)


def _driver_context(
    ctx: RunContext, warm_ups: WarmUps, i: int, stats: StageStats, rejected: RejectedWriter | None = None
) -> DriverContext:
    """What stage ``i`` sees in the driver (``setup``, ``prepare_decide``, ``decide``)."""
    work = ctx.run.stage_dir(i, ctx.labels[i])
    work.mkdir(parents=True, exist_ok=True)
    ctx.run.output.mkdir(parents=True, exist_ok=True)
    return DriverContext(
        work_dir=work,
        output_dir=ctx.run.output,
        task_ids=ctx.task_ids,
        seed=ctx.recipe.seed,
        artifacts=ctx.artifacts,
        stats=stats,
        workers=ctx.workers,
        quiet=ctx.quiet,
        executor=ctx.executor,
        while_waiting=partial(warm_ups.run_after, i),
        label=ctx.labels[i],
        rejected=rejected,
        input_sample=partial(input_sample, ctx),
    )


INPUT_SAMPLE_TASKS = 32


def input_sample(ctx: RunContext, max_bytes: int) -> list[str]:
    """Texts of the run's input (see :class:`DriverContext`): the first documents of up to
    INPUT_SAMPLE_TASKS tasks spread evenly over the plan (tasks i * n // k), read as pass 0 reads
    them but with bad records skipped and nothing counted, each task giving up to its share of
    ``max_bytes`` UTF-8 bytes (the document that crosses it cut there, at a character boundary)."""
    tasks = ctx.plan.tasks
    k = min(len(tasks), INPUT_SAMPLE_TASKS)
    if k == 0 or max_bytes <= 0:
        return []
    share = max(max_bytes // k, 1)
    texts: list[str] = []
    for j in range(k):
        split = tasks[j * len(tasks) // k]
        report = ReadReport(StageStats(), "skip")
        docs = read_task(split, ctx.recipe.reader, report)
        try:
            texts += texts_within_bytes((doc.text for doc in docs), share)
        finally:
            close = getattr(docs, "close", None)
            if close is not None:
                close()
    return texts


def _decide(ctx: RunContext, warm_ups: WarmUps, p: Pass) -> dict[str, Any]:
    """The decide of the global stage that ends pass ``p``, run once: its result (manifest
    entries, stats, artifacts it published, lengths of the documents it dropped, and
    ``nothing_left``) is recorded in the pass's decided.json and merged into ``ctx``."""
    assert p.compute is not None
    run, label = ctx.run, ctx.labels[p.compute]
    decided = run.decided(p.index)
    t0 = ctx.clock.start()
    if decided.exists():
        result = json.loads(decided.read_text())
    else:
        if not ctx.quiet:
            _log(f"{label}: deciding over the whole corpus")
        dstats = StageStats()
        before = dict(ctx.artifacts)
        st = ctx.stages[p.compute]
        assert isinstance(st, GlobalStage)
        rejected = RejectedWriter(run.rejected(p.index, DECIDE_TASK))
        dctx = _driver_context(ctx, warm_ups, p.compute, dstats, rejected)
        dctx.docs_in = sum(
            json.loads(run.marker(p.index, t).read_text())["stages"][label]["docs_in"] for t in ctx.task_ids
        )
        nothing_left = ""
        try:
            entries = st.decide(dctx)
        except NothingLeft as e:  # the stage rejected what it had: the run ends here
            entries, nothing_left = {}, str(e)
        rejected.close()
        unkept = Histogram(LENGTH_EDGES)
        unkept.add(dctx.unkept_chars)
        result = {
            "manifest": entries or {},
            "stats": dstats.to_json(),
            "artifacts": {k: v for k, v in ctx.artifacts.items() if before.get(k) != v},
            "unkept_lengths": unkept.to_json(),
            "nothing_left": nothing_left,
            "rejected_sha256": rejected.sha256,
        }
        write_text_atomic(decided, json.dumps(result, ensure_ascii=False))
    ctx.artifacts.update(result["artifacts"])
    ctx.manifest_parts.append(result["manifest"])
    ctx.driver_stats[label].merge(StageStats.from_json(result["stats"]))
    ctx.clock.stop(f"decide.{label}", t0)
    return result


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
    _log(f"done in {seconds:.1f}s: {t['docs_in']} documents read, {t['kept']} kept, {t['dropped']} dropped")
    for key, n in t["dropped_by_reason"].items():
        _log(f"  dropped {n:>8}  {key}")
    problems = stats["input"]["problems"]
    bad = {k: v for k, v in problems.items() if k not in ("files.read",)}
    if bad:
        _log("input problems: " + ", ".join(f"{k}={v}" for k, v in bad.items()))
        for kind, items in stats["input"]["problem_samples"].items():
            for item in items[:3]:
                _log(f"  {kind}: {item['where']}: {item['message']}")
    _log(f"outputs in {out}: manifest.json, stats.json, report.html")
