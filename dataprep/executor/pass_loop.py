"""The pass loop of a run: every stage set up, then per pass its tasks on the executor (those
without a completion marker) and the decide of the global stage that ends it (once: its result
recorded in the pass's decided.json), in the driver, with what each stage sees there.
"""

from __future__ import annotations

import json
from concurrent.futures import Future
from functools import partial
from typing import Any

from dataprep.docstore import RejectedWriter
from dataprep.document import texts_within_bytes
from dataprep.executor.context import RunContext
from dataprep.executor.finalize import draw_ahead
from dataprep.executor.merge import read_file_notes
from dataprep.executor.outdir import disk_use
from dataprep.executor.passes import DECIDE_TASK, Pass
from dataprep.executor.sweep import remove_all
from dataprep.executor.task import check_marker, run_id, run_task
from dataprep.executor.warmup import WarmUps
from dataprep.io import write_text_atomic
from dataprep.progress import Progress, log
from dataprep.stage.context import DriverContext
from dataprep.stage.protocol import GlobalStage, NothingLeft
from dataprep.stage.reader import ReadReport, read_task
from dataprep.stats import LENGTH_EDGES, Histogram, StageStats


def run_passes(ctx: RunContext) -> tuple[list[Pass], dict[str, str] | None]:
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
        if after_pass is not None and ctx.executor.has_workers:
            if p is not ctx.passes[-1]:  # the next pass's stages' (e.g. the tokenizer's engine)
                following = ctx.passes[p.index + 1]
                stages = [i for i in [following.apply, *following.maps] if i is not None]
            else:  # the last decide's (shard writers)
                stages = [] if p.compute is None else list(range(p.compute, len(ctx.stages)))
            warm_ups.run_at_pass_end(stages, after_pass, run.work / "warm-ups" / f"pass{p.index}")
        _run_tasks(ctx, p)
        if p.index == 0 and not ctx.quiet:  # the small files that pass 0 found not to be text
            for note in read_file_notes(run, ctx.task_ids):
                log(f"warning: {note['file']}: {note['message']}")
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
            log(f"{label}: deciding over the whole corpus")
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
