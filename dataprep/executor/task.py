"""The worker side: one task of one pass, a pure function of (the run's spec, OUT, pass, task).

:func:`run_task` reads the task's input (its split in pass 0, else the documents the previous
pass wrote), runs the pass's stages batch by batch with exact accounting (every document is kept
or dropped with a reason), writes its documents, its rejected documents and its stats under
OUT/work/, then a completion marker, each through a rename. It runs wherever an executor puts it:
in the driver, in a pool worker or in a Ray worker.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import operator
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from dataprep.docstore import DocWriter, RejectedWriter, read_docs, refused
from dataprep.document import Document, Drop
from dataprep.executor.passes import IO_CPU, RunDir, plan_passes
from dataprep.inputs import source_of
from dataprep.io import atomic_write, read_work_json, write_text_atomic
from dataprep.plan import Plan, gc_paused
from dataprep.readers import InputChanged
from dataprep.recipe import Recipe
from dataprep.stage.context import StageContext
from dataprep.stage.protocol import GlobalStage, MapStage, Stage
from dataprep.stage.reader import ReadReport, read_task
from dataprep.stats import LENGTH_EDGES, Histogram, StageStats


class _WorkerState:
    """Per-process cache: the recipe (the run's spec, as the driver resolved it), its stages and
    the tasks of the run being executed (of its plan, only they)."""

    def __init__(self, run: RunDir, recipe: Recipe, key: tuple[Any, ...]):
        self.recipe = recipe
        self.stages = [spec.build() for spec in self.recipe.stages]
        with gc_paused():
            self.tasks = Plan.tasks_from_json(read_work_json(run.work / "plan.json")["plan"])
        self.passes = plan_passes(self.stages)
        self.key = key
        self._by_source: dict[str, list[Stage]] = {}

    def stages_for(self, task_index: int) -> list[Stage]:
        """The stages of a task: a task reads one file, so it belongs to at most one source, whose
        per-source overrides (``sources[].stages``) apply to all its documents."""
        names = [s.name for s in self.recipe.sources]
        k = source_of(self.tasks[task_index].rel, names) if names else -1
        if k < 0 or not self.recipe.sources[k].stages:
            return self.stages
        if names[k] not in self._by_source:
            specs = self.recipe.stages_for(names[k])
            self._by_source[names[k]] = [
                built if spec is base else spec.build()
                for spec, base, built in zip(specs, self.recipe.stages, self.stages, strict=True)
            ]
        return self._by_source[names[k]]


_STATE: dict[str, _WorkerState] = {}


def _state(run: RunDir, recipe: Recipe) -> _WorkerState:
    key = str(run.out)
    state = _STATE.get(key)
    saved = json.loads((run.work / "run.json").read_text())
    # same OUT, recipe, inputs and start: same plan and stages (a run started over builds them anew)
    run_key = (saved["recipe_hash"], saved["inputs"], saved.get("started", ""))
    if state is None or state.key != run_key:
        if recipe.hash() != run_key[0]:
            raise RuntimeError(
                f"{run.work / 'run.json'}: the run there is not of the recipe this task was given"
            )
        state = _STATE[key] = _WorkerState(run, recipe, run_key)
    return state


def _batches(it: Iterator[Document], size: int) -> Iterator[list[Document]]:
    batch: list[Document] = []
    for doc in it:
        batch.append(doc)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


_text = operator.attrgetter("text")


def _lengths(docs: list[Document]) -> list[int]:
    """Characters of each document's text."""
    return list(map(len, map(_text, docs)))


def _chars(docs: list[Document]) -> int:
    """Characters of the documents' texts, summed."""
    return sum(map(len, map(_text, docs)))


def _account(
    label: str,
    stats: StageStats,
    batch: list[Document],
    results: list[Any],
    rejected: RejectedWriter,
    chars_in: int | None,
) -> tuple[list[Document], int]:
    """Check a stage's 1:1 contract, update its counters, write drops; return the surviving docs
    and their characters now (the next stage's ``chars_in``). ``chars_in``: the batch's
    characters as the stage received it, counted before it ran, since stages may rewrite texts in
    place (None: the batch's arrivals are counted elsewhere)."""
    if len(results) != len(batch):
        raise RuntimeError(f"stage {label!r} returned {len(results)} results for {len(batch)} documents")
    if chars_in is not None:
        stats.docs_in += len(batch)
        stats.chars_in += chars_in
    if all(map(operator.is_, results, batch)):  # every document kept (perhaps rewritten)
        kept: list[Document] = list(results)
    else:
        kept = []
        for r in results:
            if isinstance(r, Drop):
                stats.drop(r.reason, len(r.doc.text), r.doc.where)
                rejected.write(r, label)
            else:
                kept.append(r)
    chars_out = _chars(kept)
    stats.docs_out += len(kept)
    stats.chars_out += chars_out
    return kept, chars_out


def _map_step(stage: Stage, batch: list[Document], ctx: StageContext) -> list[Any]:
    """A map stage's results; a global stage without a global pass runs its ``apply`` as a map."""
    if isinstance(stage, GlobalStage):
        return stage.apply(batch, ctx)
    assert isinstance(stage, MapStage)
    return stage.process(batch, ctx)


TASK_GC_THRESHOLD = 50_000  # young-generation threshold of the garbage collector inside a task


@contextlib.contextmanager
def young_collections_every(allocations: int) -> Iterator[None]:
    """Within the block, the cyclic garbage collector's youngest generation is collected after
    ``allocations`` net container allocations instead of CPython's default (700), so full collections
    (which traverse every object of the process) come that much more rarely. A task's documents,
    batches and arrays are freed by reference counting; only the bookkeeping of the collector
    changes. The previous thresholds are restored on exit."""
    previous = gc.get_threshold()
    gc.set_threshold(max(allocations, previous[0]), *previous[1:])
    try:
        yield
    finally:
        gc.set_threshold(*previous)


def _run_id(state: _WorkerState) -> str:
    return run_id(*state.key)


def run_id(recipe_hash: str, inputs: Any, started: str) -> str:
    """What a completion marker names its run by: the sha256 of the recipe hash, the inputs'
    fingerprint and the run's start (a random id drawn when a run starts afresh, kept by resumes),
    so work of another run, even of the same recipe and inputs, is foreign."""
    key = json.dumps([recipe_hash, inputs, started], sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()


def check_marker(marker: Path, expected_run: str) -> None:
    """Refuse (:class:`WorkMismatch`) a completion marker that another run wrote."""
    if json.loads(marker.read_text()).get("run") != expected_run:
        raise refused(marker, "it records another recipe, seed or input than this run's")


def _docs_sha256(run: RunDir, pass_index: int, task_id: str) -> str:
    """The sha256 that the completion marker of a task records for the documents it wrote."""
    marker = run.marker(pass_index, task_id)
    digest = json.loads(marker.read_text()).get("docs_sha256")
    if not isinstance(digest, str):
        raise refused(marker, "it records no sha256 for the documents of its task")
    return digest


def run_task(
    recipe: Recipe,
    out: str,
    pass_index: int,
    task_index: int,
    progress: Callable[[int, int], None] | None = None,
) -> None:
    """Run one task of one pass of the run of ``recipe`` in ``out`` and write its completion marker
    (idempotent). Executors get it bound to all but the task (:data:`dataprep.executor.base.PassTask`),
    so the recipe travels with it, resolved once by the driver. A pass-0 task that
    finds an input changed since it was planned records so (:meth:`RunDir.changed`) and raises
    :class:`InputChanged`."""
    with young_collections_every(TASK_GC_THRESHOLD):
        try:
            _run_task(recipe, out, pass_index, task_index, progress)
        except InputChanged as e:
            run = RunDir(Path(out))
            write_text_atomic(
                run.changed(f"t{task_index:05d}"), json.dumps({"file": e.rel, "message": str(e)})
            )
            raise


def _run_task(
    recipe: Recipe, out: str, pass_index: int, task_index: int, progress: Callable[[int, int], None] | None
) -> None:
    run = RunDir(Path(out))
    state = _state(run, recipe)
    task_id = f"t{task_index:05d}"
    run_id_ = _run_id(state)
    if run.marker(pass_index, task_id).exists():
        check_marker(run.marker(pass_index, task_id), run_id_)
        return
    recipe, stages, p = state.recipe, state.stages_for(task_index), state.passes[pass_index]
    artifacts = json.loads((run.work / "artifacts.json").read_text())
    labels = [s.label for s in recipe.stages]
    stats = {i: StageStats() for i in [*p.maps, p.apply, p.compute] if i is not None}
    read_stats = StageStats()
    rejected = RejectedWriter(run.rejected(pass_index, task_id))
    batch_size = recipe.input_params.batch_size
    kept_lengths = Histogram(LENGTH_EDGES)
    read_lengths = Histogram(LENGTH_EDGES)

    def ctx(i: int) -> StageContext:
        return StageContext(
            stats=stats[i],
            work_dir=run.stage_dir(i, labels[i]),
            task_id=task_id,
            task_index=task_index,
            num_tasks=len(state.tasks),
            seed=recipe.seed,
            artifacts=artifacts,
        )

    contexts = {i: ctx(i) for i in stats}
    for i, c in contexts.items():
        c.work_dir.mkdir(parents=True, exist_ok=True)
        stages[i].begin_task(c)
    report = ReadReport(read_stats, recipe.input_params.on_error, rejected)
    if pass_index == 0:
        split = state.tasks[task_index]
        source: Iterator[list[Document]] = _batches(read_task(split, recipe.reader, report), batch_size)
    else:
        source = read_docs(
            run.docs(pass_index - 1, task_id), batch_size, _docs_sha256(run, pass_index - 1, task_id)
        )
    terminal = p.compute is not None and getattr(stages[p.compute], "terminal", False)
    last_pass = pass_index == len(state.passes) - 1
    keep_docs = not terminal or recipe.output.documents  # a terminal pass's: documents/ beside the shards
    writer = DocWriter(run.docs(pass_index, task_id, final=last_pass)) if keep_docs else None
    last_position = 0
    cpu: Counter[str] = Counter()  # CPU seconds per stage label in this task
    task_cpu = time.process_time()

    def timed(label: str, fn: Callable[..., Any], *args: Any) -> Any:
        t = time.process_time()
        result = fn(*args)
        cpu[label] += time.process_time() - t
        return result

    for batch in source:
        if pass_index == 0:
            read = _lengths(batch)
            read_lengths.add(read)
            chars = sum(read)
        else:
            chars = _chars(batch)
        n_in = len(batch)
        if p.apply is not None:
            st = stages[p.apply]
            assert isinstance(st, GlobalStage)
            results = timed(labels[p.apply], st.apply, batch, contexts[p.apply])
            batch, chars = _account(labels[p.apply], stats[p.apply], batch, results, rejected, None)
        for i in p.maps:
            results = timed(labels[i], _map_step, stages[i], batch, contexts[i])
            batch, chars = _account(labels[i], stats[i], batch, results, rejected, chars)
        if p.compute is not None:
            st = stages[p.compute]
            assert isinstance(st, GlobalStage)
            stats[p.compute].docs_in += len(batch)
            stats[p.compute].chars_in += chars
            if terminal:
                stats[p.compute].docs_out += len(batch)
                stats[p.compute].chars_out += chars
                kept_lengths.add(_lengths(batch))
            timed(labels[p.compute], st.compute, batch, contexts[p.compute])
        elif last_pass:
            kept_lengths.add(_lengths(batch))
        if writer is not None:
            writer.write(batch)
        if progress is not None:
            position = report.base + report.position if pass_index == 0 else 0
            progress(n_in, max(position - last_position, 0))
            last_position = position
    if p.compute is not None:
        compute_stage = stages[p.compute]
        assert isinstance(compute_stage, GlobalStage)
        timed(labels[p.compute], compute_stage.finish_compute, contexts[p.compute])
    if writer is not None:
        writer.close()
    rejected.close()
    cpu[IO_CPU] = time.process_time() - task_cpu - sum(cpu.values())
    if pass_index == 0:
        read_stats.histogram("length_chars", LENGTH_EDGES).merge(read_lengths)
    inputs_sha256 = None
    if pass_index == 0:  # the input ranges read and their sha256, beside the marker (thousands for a group)
        listed = json.dumps(report.read_sha256).encode()
        with atomic_write(run.input_hashes(task_id)) as f:
            f.write(listed)
        inputs_sha256 = hashlib.sha256(listed).hexdigest()
    marker = {
        "run": run_id_,
        "inputs_sha256": inputs_sha256,
        "stages": {labels[i]: s.to_json() for i, s in sorted(stats.items())},
        "read": read_stats.to_json() if pass_index == 0 else None,
        "samples": report.samples,
        "file_notes": report.file_notes,
        "kept_lengths": kept_lengths.to_json(),
        "docs_written": writer.docs if writer is not None else 0,
        "docs_sha256": writer.sha256 if writer is not None else None,
        "rejected_sha256": rejected.sha256,
        "cpu_seconds": dict(cpu),
    }
    write_text_atomic(run.marker(pass_index, task_id), json.dumps(marker, ensure_ascii=False))
