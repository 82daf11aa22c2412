"""Running a recipe: passes over the corpus, per-task completion markers, resume, final outputs.

A recipe's stage list is cut into *passes* at every global stage that needs the whole corpus:

    pass 0: read -> map stages ... -> G1.compute          (one task per input split)
    G1.decide                                           (once, in the driver)
    pass 1: G1.apply -> map stages ... -> G2.compute    (same tasks, reading pass 0's documents)
    ...

Each task of a pass is a pure function of (OUT, pass, task): :func:`run_task`. It writes its
documents (Parquet), its rejected documents and its stats under OUT/work/, then a completion
marker, each through a rename. A rerun skips tasks and decisions whose markers exist, so a run
killed at any point resumes and produces byte-identical outputs; since tasks are fixed by the
input (never by the worker count) and merged in task order, 1 and N workers agree too.
Final outputs are assembled in OUT/.final and moved into place only when complete.
"""

from __future__ import annotations

import contextlib
import gc
import json
import operator
import os
import shutil
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from dataprep import __version__, worker_env
from dataprep import stage as registry
from dataprep.docstore import FRAMES_SUFFIX, PARQUET_SUFFIX, DocWriter, RejectedWriter, read_docs
from dataprep.document import Document, Drop
from dataprep.io import write_text_atomic
from dataprep.outcome import nothing_left_message, read_hint
from dataprep.plan import InputFile, Plan, expand_inputs, make_plan
from dataprep.progress import Progress
from dataprep.recipe import Recipe, recipe_from_resolved
from dataprep.stage import (
    DriverContext,
    GlobalStage,
    MapStage,
    NothingLeft,
    ReadReport,
    Stage,
    StageContext,
)
from dataprep.stats import LENGTH_EDGES, Histogram, StageStats, check_accounting

READ_LABEL = "read"
IO_CPU = "(read, parse, write documents)"  # a task's CPU seconds outside its stages
COMPLETE = "complete.json"  # in OUT/work once the outputs are in place
DECIDE_TASK = "decide"  # names a pass's rejected/ directory for the documents its decide drops
OUTPUT_ENTRIES = (
    "manifest.json",
    "stats.json",
    "report.html",
    "recipe.yaml",
    "timings.json",
    "rejected",
    "shards",
    "tokenizer",
    "documents",
)


class RunError(RuntimeError):
    """The run cannot go on; the message says what to do."""


class NothingLeftError(RunError):
    """The run ended with no document left (its stats.json and report.html are written); the
    message counts the documents read and dropped by reason and says what to change."""


@dataclass
class Pass:
    """One pass over the corpus. apply: a global stage whose ``apply`` runs first; maps: stages run
    per batch (map stages, and global stages that need no global pass); compute: a global stage
    whose ``compute`` ends the pass (its ``decide`` follows the pass)."""

    index: int
    apply: int | None
    maps: list[int]
    compute: int | None


def plan_passes(stages: list[Stage]) -> list[Pass]:
    passes: list[Pass] = []
    current = Pass(0, None, [], None)
    for i, st in enumerate(stages):
        if isinstance(st, GlobalStage) and st.needs_global_pass():
            current.compute = i
            passes.append(current)
            if st.terminal:
                return passes
            current = Pass(len(passes), i, [], None)
        else:
            current.maps.append(i)
    passes.append(current)
    return passes


class RunDir:
    """Paths inside OUT."""

    def __init__(self, out: Path):
        self.out = out
        self.work = out / "work"
        self.final = out / ".final"
        self.output = self.work / "output"  # global stages write final files here

    def pass_dir(self, p: int) -> Path:
        return self.work / f"pass{p}"

    def docs(self, p: int, task_id: str, final: bool = False) -> Path:
        """A task's documents after pass p: Parquet when they become outputs (``final``), else
        frames, cheaper to write and read (see :mod:`dataprep.docstore`)."""
        suffix = PARQUET_SUFFIX if final else FRAMES_SUFFIX
        return self.pass_dir(p) / "docs" / f"{task_id}{suffix}"

    def marker(self, p: int, task_id: str) -> Path:
        return self.pass_dir(p) / "done" / f"{task_id}.json"

    def rejected(self, p: int, task_id: str) -> Path:
        return self.pass_dir(p) / "rejected" / task_id

    def decided(self, p: int) -> Path:
        return self.pass_dir(p) / "decided.json"

    def stage_dir(self, index: int, label: str) -> Path:
        return self.work / "stages" / f"{index:02d}-{label}"


# ---------------------------------------------------------------------------------------------
# Worker side


class _WorkerState:
    """Per-process cache: the recipe, its stages and the plan of the run being executed."""

    def __init__(self, run: RunDir):
        state = json.loads((run.work / "run.json").read_text())
        self.recipe = recipe_from_resolved(state["recipe"])
        self.stages = [spec.build() for spec in self.recipe.stages]
        self.plan = Plan.from_json(json.loads((run.work / "plan.json").read_text())["plan"])
        self.passes = plan_passes(self.stages)
        self.readers: dict[str, registry.Reader] = {}
        self.key = (state["recipe_hash"], state["inputs"])

    def reader(self, name: str) -> registry.Reader:
        if name not in self.readers:
            cls = registry.get(name)
            self.readers[name] = cls(self.recipe.reader_params(cls))
        return self.readers[name]


_STATE: dict[str, _WorkerState] = {}


def _state(run: RunDir) -> _WorkerState:
    key = str(run.out)
    state = _STATE.get(key)
    saved = json.loads((run.work / "run.json").read_text())
    run_key = (saved["recipe_hash"], saved["inputs"])  # same OUT, recipe and inputs: same plan
    if state is None or state.key != run_key:
        state = _STATE[key] = _WorkerState(run)
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
def _young_collections_every(allocations: int) -> Iterator[None]:
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


def run_task(
    out: str, pass_index: int, task_index: int, progress: Callable[[int, int], None] | None = None
) -> None:
    """Run one task of one pass and write its completion marker (idempotent)."""
    with _young_collections_every(TASK_GC_THRESHOLD):
        _run_task(out, pass_index, task_index, progress)


def _run_task(
    out: str, pass_index: int, task_index: int, progress: Callable[[int, int], None] | None
) -> None:
    run = RunDir(Path(out))
    state = _state(run)
    task_id = f"t{task_index:05d}"
    if run.marker(pass_index, task_id).exists():
        return
    recipe, stages, p = state.recipe, state.stages, state.passes[pass_index]
    artifacts = json.loads((run.work / "artifacts.json").read_text())
    labels = [s.label for s in recipe.stages]
    stats = {i: StageStats() for i in [*p.maps, p.apply, p.compute] if i is not None}
    read_stats = StageStats()
    rejected = RejectedWriter(run.rejected(pass_index, task_id))
    batch_size = recipe.input["batch_size"]
    kept_lengths = Histogram(LENGTH_EDGES)
    read_lengths = Histogram(LENGTH_EDGES)

    def ctx(i: int) -> StageContext:
        return StageContext(
            stats=stats[i],
            work_dir=run.stage_dir(i, labels[i]),
            task_id=task_id,
            task_index=task_index,
            num_tasks=len(state.plan.tasks),
            seed=recipe.seed,
            artifacts=artifacts,
        )

    contexts = {i: ctx(i) for i in stats}
    for i, c in contexts.items():
        c.work_dir.mkdir(parents=True, exist_ok=True)
        stages[i].begin_task(c)
    report = ReadReport(read_stats, recipe.input["on_error"], rejected)
    if pass_index == 0:
        split = state.plan.tasks[task_index]
        source: Iterator[list[Document]] = _batches(
            state.reader(split.reader).read(split, report), batch_size
        )
    else:
        previous = run.docs(pass_index - 1, task_id)
        if not previous.exists() and previous.with_suffix(PARQUET_SUFFIX).exists():
            previous = previous.with_suffix(PARQUET_SUFFIX)  # a run begun by an earlier version
        source = read_docs(previous, batch_size)
    terminal = p.compute is not None and getattr(stages[p.compute], "terminal", False)
    last_pass = pass_index == len(state.passes) - 1
    writer = None if terminal else DocWriter(run.docs(pass_index, task_id, final=last_pass))
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
            position = report.position if pass_index == 0 else 0
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
    marker = {
        "stages": {labels[i]: s.to_json() for i, s in sorted(stats.items())},
        "read": read_stats.to_json() if pass_index == 0 else None,
        "samples": report.samples,
        "kept_lengths": kept_lengths.to_json(),
        "docs_written": writer.docs if writer is not None else 0,
        "cpu_seconds": dict(cpu),
    }
    write_text_atomic(run.marker(pass_index, task_id), json.dumps(marker, ensure_ascii=False))


def _pool_task(out: str, pass_index: int, task_index: int) -> None:
    last = [time.monotonic(), 0, 0]

    def progress(docs: int, nbytes: int) -> None:
        last[1] += docs
        last[2] += nbytes
        now = time.monotonic()
        if now - last[0] > 0.25 and worker_env.progress_queue is not None:
            worker_env.progress_queue.put((last[1], last[2]))
            last[0], last[1], last[2] = now, 0, 0

    run_task(out, pass_index, task_index, progress)
    if worker_env.progress_queue is not None and (last[1] or last[2]):
        worker_env.progress_queue.put((last[1], last[2]))


# ---------------------------------------------------------------------------------------------
# Driver side


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class LocalExecutor:
    """Runs the tasks of a pass on a pool of ``workers`` processes (in-process when 1)."""

    def __init__(self, workers: int):
        self.workers = max(1, workers)
        self._pool: ProcessPoolExecutor | None = None
        self._queue: Any = None

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def _ensure_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            import multiprocessing as mp

            ctx = mp.get_context("spawn")
            self._queue = ctx.Queue()
            self._pool = ProcessPoolExecutor(
                self.workers, mp_context=ctx, initializer=worker_env.init_pool_worker, initargs=(self._queue,)
            )
        return self._pool

    def worker_pids(self) -> list[int]:
        """Process ids of the live pool workers (for CPU accounting)."""
        if self._pool is None:
            return []
        return list(getattr(self._pool, "_processes", None) or {})

    def map(self, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        """[fn(x) for x in items], run on the worker pool; fn must be a module-level function. A
        single item runs in this process unless the pool is already up (it may hold a warm-up)."""
        if self.workers == 1 or not items or (len(items) == 1 and self._pool is None):
            return [fn(x) for x in items]
        # many small items (e.g. planning thousands of input files) go in chunks, a few per worker
        chunk = max(1, len(items) // (4 * self.workers))
        return list(self._ensure_pool().map(fn, items, chunksize=chunk))

    def submit(self, fn: Callable[[Any], Any], arg: Any) -> Any:
        """Start fn(arg) on a pool worker and return its future (``.result()``); None when the run
        has one worker (everything then runs in this process, in order)."""
        if self.workers == 1:
            return None
        return self._ensure_pool().submit(fn, arg)

    def run_pass(self, out: Path, pass_index: int, task_indices: list[int], bar: Progress) -> None:
        if self.workers == 1 or len(task_indices) <= 1:
            with worker_env.single_threaded_encoders():  # like a pool worker: one worker, one CPU
                for t in task_indices:
                    run_task(str(out), pass_index, t, bar.update)
            return
        pool = self._ensure_pool()

        thread = threading.Thread(target=relay_progress, args=(self._queue, bar), daemon=True)
        thread.start()
        try:
            futures = [pool.submit(_pool_task, str(out), pass_index, t) for t in task_indices]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            for f in done:
                if f.exception() is not None:
                    for g in futures:
                        g.cancel()
                    raise f.exception()  # type: ignore[misc]
        finally:
            self._queue.put(None)
            thread.join()
            while True:  # updates that came after the None
                try:
                    docs, nbytes = self._queue.get_nowait()
                except Exception:  # queue.Empty
                    break
                bar.update(docs, nbytes)


def relay_progress(queue: Any, bar: Progress) -> None:
    """Pass the workers' (documents, bytes) updates from ``queue`` to ``bar`` until a None, which
    the driver puts when the pass is over (so the relay ends at once, with no polling)."""
    while (update := queue.get()) is not None:
        bar.update(*update)


class WarmUps:
    """Runs the warm-ups of a run's stages (:meth:`Stage.warm_ups`), once each, ahead of the
    stage that needs them, while the driver waits on a process of its own (``while_waiting``,
    e.g. tokenizer training). ``start(fn)`` runs one warm-up where the stage's work will run: see
    :meth:`in_driver` and :meth:`on_pool`. A warm-up that fails is ignored: the work that needs
    it meets the problem where it belongs."""

    def __init__(self, stages: list[Stage], start: Callable[[Callable[[Any], Any]], None]):
        self._stages = stages
        self._start = start
        self._done: set[Callable[[Any], Any]] = set()

    @classmethod
    def in_driver(cls, stages: list[Stage]) -> WarmUps:
        """For a run whose driver does the stages' work itself (one worker, local executor)."""

        def start(fn: Callable[[Any], Any]) -> None:
            with contextlib.suppress(Exception):
                fn(None)

        return cls(stages, start)

    @classmethod
    def on_pool(cls, stages: list[Stage], submit: Callable[..., Any], workers: int) -> WarmUps:
        """For ``workers`` pool or Ray workers: each warm-up is sent once per worker (idle
        workers usually take one each; a worker that gets two finds the second done) and runs at
        the lowest CPU priority (:func:`warm_up_at_low_priority`), so it takes only the CPU the
        waited-on process leaves idle. At normal priority, warming two workers during tokenizer
        training slowed the training about as much as it saved."""

        def start(fn: Callable[[Any], Any]) -> None:
            for _ in range(workers):
                submit(warm_up_at_low_priority, fn)

        return cls(stages, start)

    def run_after(self, index: int) -> None:
        """Start the warm-ups of the stages after stage ``index`` not started yet."""
        for st in self._stages[index + 1 :]:
            for fn in st.warm_ups():
                if fn not in self._done:
                    self._done.add(fn)
                    self._start(fn)


def warm_up_at_low_priority(fn: Callable[[Any], Any]) -> None:
    """fn(None) in a thread of this process that runs at the lowest CPU priority (niceness 19;
    on Linux a thread's niceness is its own, so the calling thread keeps its priority), waited
    for. Errors are ignored, as for any warm-up."""

    def run() -> None:
        with contextlib.suppress(OSError, AttributeError):  # AttributeError: no setpriority
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        with contextlib.suppress(Exception):
            fn(None)

    thread = threading.Thread(target=run, name="warm-up")
    thread.start()
    thread.join()


def _process_cpu(pid: int) -> float:
    """CPU seconds (user + system) a live process has used so far; 0 when unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


class PhaseClock:
    """Wall and CPU seconds per phase of a run (``timings.json``). CPU counts this process, its
    finished children (e.g. a tokenizer trained in a process of its own) and the live workers of
    the executor, when it names them (``worker_pids``; read from /proc, so Linux only); driver CPU
    counts this process alone: the serial part of a phase, which more workers do not shorten. On
    a shared machine CPU seconds are the steadier measure."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.driver_cpu: dict[str, float] = {}
        self.runner: Any = None

    def _cpu(self) -> tuple[float, float]:
        """(CPU seconds of the driver, its children and the workers; of the driver alone)."""
        t = os.times()
        driver = t.user + t.system
        pids = getattr(self.runner, "worker_pids", None)
        workers = sum(_process_cpu(pid) for pid in (pids() if pids else []))
        others = t.children_user + t.children_system + workers
        return driver + others, driver

    def start(self) -> tuple[float, float, float]:
        return time.monotonic(), *self._cpu()

    def stop(self, name: str, started: tuple[float, float, float]) -> None:
        total, driver = self._cpu()
        self.seconds[name] = self.seconds.get(name, 0.0) + time.monotonic() - started[0]
        self.cpu[name] = self.cpu.get(name, 0.0) + max(total - started[1], 0.0)
        self.driver_cpu[name] = self.driver_cpu.get(name, 0.0) + max(driver - started[2], 0.0)


def _default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _plan_run(
    run: RunDir, files: list[InputFile], recipe: Recipe, parallel_map: Callable[..., list[Any]]
) -> tuple[Plan, StageStats, dict[str, list[dict[str, str]]]]:
    """(plan, its stats, its problem samples) of the run: made once, files planned and hashed in
    parallel by ``parallel_map``, and kept in work/plan.json for resumed runs."""
    plan_file = run.work / "plan.json"
    if plan_file.exists():
        saved = json.loads(plan_file.read_text())
        plan = Plan.from_json(saved["plan"])
        plan.sha256 = plan.sha256 or saved.get("sha256", {})  # where plan.json kept them before
        return plan, StageStats.from_json(saved["stats"]), saved["samples"]
    stats = StageStats()
    report = ReadReport(stats, recipe.input["on_error"])
    scratch = run.work / "inputs"
    plan = make_plan(files, recipe, report, scratch, parallel_map=parallel_map, hash_files=True)
    saved = {"plan": plan.to_json(), "stats": stats.to_json(), "samples": report.samples}
    write_text_atomic(plan_file, json.dumps(saved))
    return plan, stats, report.samples


def _prepare_out(run: RunDir, fingerprint: dict[str, Any]) -> bool:
    """Make OUT ready; True when resuming a compatible earlier run."""
    state_file = run.work / "run.json"
    if state_file.exists():
        previous = json.loads(state_file.read_text())
        if {k: previous.get(k) for k in fingerprint} == fingerprint:
            return True
        _log(f"{run.out}: the recipe, seed or inputs changed since the last run there; starting over")
    elif run.out.exists() and any(run.out.iterdir()):
        known = set(OUTPUT_ENTRIES) | {"work", ".final"}
        foreign = sorted(p.name for p in run.out.iterdir() if p.name not in known)
        if foreign:
            raise RunError(
                f"{run.out} already holds files that dataprep did not write ({', '.join(foreign[:5])}); "
                "choose another --out"
            )
    for name in [*OUTPUT_ENTRIES, "work", ".final"]:
        path = run.out / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    run.work.mkdir(parents=True, exist_ok=True)
    return False


def _merge_task_stats(
    run: RunDir, passes: list[Pass], labels: list[str], task_ids: list[str]
) -> tuple[StageStats, dict[str, StageStats], dict[str, list[dict[str, str]]], Histogram]:
    read = StageStats()
    per_stage = {label: StageStats() for label in labels}
    samples: dict[str, list[dict[str, str]]] = {}
    kept = Histogram(LENGTH_EDGES)
    for p in passes:
        for t in task_ids:
            marker = json.loads(run.marker(p.index, t).read_text())
            if marker["read"] is not None:
                read.merge(StageStats.from_json(marker["read"]))
            for label, s in marker["stages"].items():
                per_stage[label].merge(StageStats.from_json(s))
            for kind, items in marker["samples"].items():
                bucket = samples.setdefault(kind, [])
                bucket += items[: ReadReport.SAMPLES_PER_KIND - len(bucket)]
            if p.index == passes[-1].index:
                kept.merge(Histogram.from_json(marker["kept_lengths"]))
        decided = run.decided(p.index)
        if p.index == passes[-1].index and decided.exists():  # documents its decide dropped
            unkept = json.loads(decided.read_text()).get("unkept_lengths")
            if unkept is not None:
                kept.subtract(Histogram.from_json(unkept))
    return read, per_stage, samples, kept


def _cpu_seconds(run: RunDir, passes: list[Pass], task_ids: list[str]) -> dict[str, float]:
    """CPU seconds summed over the tasks, per stage label and per pass for reading, parsing and
    writing documents ("passN.io"); rounded to ms."""
    total: Counter[str] = Counter()
    for p in passes:
        for t in task_ids:
            marker = json.loads(run.marker(p.index, t).read_text())
            for label, seconds in marker.get("cpu_seconds", {}).items():
                total[f"pass{p.index}.io" if label == IO_CPU else label] += seconds
    return {k: round(v, 3) for k, v in total.items()}


def _link_tree(src: Path, dst: Path) -> None:
    """Hard-link (or copy, across file systems) every file of src into dst."""
    for path in sorted(src.rglob("*")):
        target = dst / path.relative_to(src)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            target.unlink()
        try:
            os.link(path, target)
        except OSError:
            shutil.copy2(path, target)


def _concat_files(parts: list[Path], dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(dst, "wb") as out:
        for part in parts:
            with open(part, "rb") as f:
                shutil.copyfileobj(f, out, 1 << 20)


def make_executor(kind: str, workers: int, address: str | None = None) -> Any:
    """The executor that runs the tasks of each pass: 'local' (process pool) or 'ray'."""
    if kind == "local":
        return LocalExecutor(workers)
    if kind == "ray":
        from dataprep.ray_executor import RayExecutor

        return RayExecutor(workers, address)
    raise ValueError(f"unknown executor {kind!r} (local or ray)")


def prepare(
    inputs: list[str],
    out: str | Path,
    recipe: Recipe,
    workers: int | None = None,
    keep_work: bool = False,
    quiet: bool = False,
    executor: str = "local",
    ray_address: str | None = None,
) -> dict[str, Any]:
    """Run ``recipe`` over ``inputs`` into ``out``; returns the stats written to stats.json.
    A run that ends with no document left writes its outputs (stats.json, report.html, rejected/)
    and raises NothingLeftError, whose one line counts the documents read, the drops by reason
    (with where the largest reason's first drop came from) and says what to change."""
    started = time.monotonic()
    clock = PhaseClock()
    begun = clock.start()
    run = RunDir(Path(out).resolve())
    files = expand_inputs(inputs, exclude=run.out)
    workers = workers or _default_workers()
    fingerprint = {
        "version": __version__,
        "recipe_hash": recipe.hash(),
        "inputs": Plan(files, []).fingerprint(),
    }
    resumed = _prepare_out(run, fingerprint)
    if resumed and (run.work / COMPLETE).exists() and (run.out / "stats.json").exists():
        if not quiet:
            _log(f"{run.out}: this run is already complete (same recipe, seed and inputs); nothing to do")
        return _succeeded(json.loads((run.out / "stats.json").read_text(encoding="utf-8")), run.out)
    if resumed and not quiet:
        _log(f"resuming the run in {run.out} (completed work is kept)")
    write_text_atomic(
        run.work / "run.json",
        json.dumps({**fingerprint, "recipe": recipe.resolved()}, ensure_ascii=False, indent=1),
    )
    with make_executor(executor, workers, ray_address) as runner:
        plan, plan_stats, plan_samples = _plan_run(run, files, recipe, runner.map)
        hashes = plan.sha256
        if not quiet:
            for note in plan.file_notes:
                kind = "note" if note["kind"] == "unsupported" else "warning"
                _log(f"{kind}: {note['file']}: {note['message']}")
        task_ids = plan.task_ids
        stages = [spec.build() for spec in recipe.stages]
        labels = [spec.label for spec in recipe.stages]
        passes = plan_passes(stages)
        clock.stop("plan", begun)
        artifacts: dict[str, Any] = {}
        driver_stats = {label: StageStats() for label in labels}
        manifest_parts: list[dict[str, Any]] = []
        drawn: Any = None  # report plots drawn by a worker during the last decide
        total_bytes = sum(t.nbytes for t in plan.tasks)
        clock.runner = runner
        if executor == "local" and workers == 1:
            warm_ups = WarmUps.in_driver(stages)
        else:
            warm_ups = WarmUps.on_pool(stages, runner.submit, workers)

        def driver_ctx(i: int, stats: StageStats, rejected: RejectedWriter | None = None) -> DriverContext:
            work = run.stage_dir(i, labels[i])
            work.mkdir(parents=True, exist_ok=True)
            run.output.mkdir(parents=True, exist_ok=True)
            return DriverContext(
                work_dir=work,
                output_dir=run.output,
                task_ids=task_ids,
                seed=recipe.seed,
                artifacts=artifacts,
                stats=stats,
                workers=workers,
                quiet=quiet,
                parallel_map=runner.map,
                background=getattr(runner, "submit", None),
                while_waiting=partial(warm_ups.run_after, i),
                label=labels[i],
                rejected=rejected,
            )

        t0 = clock.start()
        for i, st in enumerate(stages):
            st.setup(driver_ctx(i, driver_stats[labels[i]]))
        clock.stop("setup", t0)
        stopped: int | None = None  # the pass whose decide found nothing left, if any
        for p in passes:
            write_text_atomic(run.work / "artifacts.json", json.dumps(artifacts, ensure_ascii=False))
            todo = [i for i, t in enumerate(task_ids) if not run.marker(p.index, t).exists()]
            names = [labels[i] for i in [p.apply, *p.maps, p.compute] if i is not None]
            title = f"pass {p.index + 1}/{len(passes)}" + (f" ({' > '.join(names)})" if names else "")
            t0 = clock.start()
            if p.compute is not None and not run.decided(p.index).exists():
                deciding = stages[p.compute]
                assert isinstance(deciding, GlobalStage)
                deciding.prepare_decide(driver_ctx(p.compute, driver_stats[labels[p.compute]]))
            if todo:
                if p.index == 0:
                    todo.sort(key=lambda i: -plan.tasks[i].nbytes)  # longest first
                prev_docs = (
                    None
                    if p.index == 0
                    else sum(
                        json.loads(run.marker(p.index - 1, t).read_text())["docs_written"] for t in task_ids
                    )
                )
                bar = Progress(
                    title,
                    total_bytes if p.index == 0 else None,
                    prev_docs,
                    quiet=quiet,
                    done_tasks=len(task_ids) - len(todo),
                    total_tasks=len(task_ids),
                )
                with bar:
                    runner.run_pass(run.out, p.index, todo, bar)
            clock.stop(f"pass{p.index}", t0)
            if p is passes[-1] and p.compute is not None and not run.decided(p.index).exists():
                t0 = clock.start()
                stats_so_far = partial(
                    _collect_stats,
                    run,
                    passes,
                    labels,
                    task_ids,
                    plan_stats,
                    plan_samples,
                    driver_stats,
                )
                drawn = _draw_ahead(runner, recipe, stats_so_far)
                clock.stop("report.draw_ahead", t0)
            if p.compute is not None:
                label = labels[p.compute]
                decided = run.decided(p.index)
                t0 = clock.start()
                if decided.exists():
                    result = json.loads(decided.read_text())
                else:
                    if not quiet:
                        _log(f"{label}: deciding over the whole corpus")
                    dstats = StageStats()
                    before = dict(artifacts)
                    st = stages[p.compute]
                    assert isinstance(st, GlobalStage)
                    rejected = RejectedWriter(run.rejected(p.index, DECIDE_TASK))
                    dctx = driver_ctx(p.compute, dstats, rejected)
                    dctx.docs_in = sum(
                        json.loads(run.marker(p.index, t).read_text())["stages"][label]["docs_in"]
                        for t in task_ids
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
                        "artifacts": {k: v for k, v in artifacts.items() if before.get(k) != v},
                        "unkept_lengths": unkept.to_json(),
                        "nothing_left": nothing_left,
                    }
                    write_text_atomic(decided, json.dumps(result, ensure_ascii=False))
                artifacts.update(result["artifacts"])
                manifest_parts.append(result["manifest"])
                driver_stats[label].merge(StageStats.from_json(result["stats"]))
                clock.stop(f"decide.{label}", t0)
                if result.get("nothing_left"):
                    stopped = p.index
                    break
            if not keep_work:  # what the next pass no longer reads
                if p.index == 0:
                    shutil.rmtree(run.work / "inputs", ignore_errors=True)
                else:
                    shutil.rmtree(run.pass_dir(p.index - 1) / "docs", ignore_errors=True)
        if drawn is not None:
            t0 = clock.start()
            try:
                drawn = drawn.result()
            except Exception:  # drawn again at the end, where a real problem shows itself
                drawn = None
            clock.stop("report.draw_ahead", t0)
        clock.runner = None  # its workers are reaped on leaving: their CPU moves to os.times()
    ran = passes if stopped is None else passes[: stopped + 1]
    cpu_seconds = _cpu_seconds(run, ran, task_ids)
    t0 = clock.start()
    stats = _finalize(
        run,
        recipe,
        plan,
        ran,
        labels,
        stages,
        task_ids,
        plan_stats,
        plan_samples,
        driver_stats,
        manifest_parts,
        hashes,
        files,
        drawn,
        stopped is not None,
    )
    clock.stop("finalize", t0)
    total = time.monotonic() - started
    timings = {
        "workers": workers,
        "seconds": {k: round(v, 3) for k, v in {**clock.seconds, "total": total}.items()},
        "cpu_seconds": {k: round(v, 2) for k, v in {**clock.cpu, "total": sum(clock.cpu.values())}.items()},
        "driver_cpu_seconds": {
            k: round(v, 2) for k, v in {**clock.driver_cpu, "total": sum(clock.driver_cpu.values())}.items()
        },
        "task_cpu_seconds": cpu_seconds,
    }
    write_text_atomic(run.out / "timings.json", json.dumps(timings, indent=1))
    write_text_atomic(run.work / COMPLETE, "{}")
    if not keep_work:  # intermediates are no longer needed; run.json + COMPLETE make reruns no-ops
        for entry in run.work.iterdir():
            if entry.name not in ("run.json", COMPLETE):
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    if not quiet and "outcome" not in stats:
        _summary(stats, run.out, total)
    return _succeeded(stats, run.out)


def _succeeded(stats: dict[str, Any], out: Path) -> dict[str, Any]:
    """``stats``, unless the run in ``out`` left no document: then NothingLeftError with its line."""
    if "outcome" in stats:
        raise NothingLeftError(f"{stats['outcome']['message']}; see {out}/report.html")
    return stats


def _finalize(
    run: RunDir,
    recipe: Recipe,
    plan: Plan,
    passes: list[Pass],
    labels: list[str],
    stages: list[Stage],
    task_ids: list[str],
    plan_stats: StageStats,
    plan_samples: dict[str, list[dict[str, str]]],
    driver_stats: dict[str, StageStats],
    manifest_parts: list[dict[str, Any]],
    hashes: dict[str, str | None],
    files: list[Any],
    drawn: dict[str, str] | None = None,
    stopped: bool = False,
) -> dict[str, Any]:
    """Assemble stats.json, manifest.json, recipe.yaml, report.html (with the plots drawn ahead of
    time in ``drawn``, if any) and move the outputs into OUT. ``passes``: those that ran;
    ``stopped``: the run ended early with no document left (no documents/ output). When no
    document is left, stats.json's ``outcome`` holds the line the run fails with."""
    from dataprep.report import write_report

    all_stats, samples, kept_lengths = _collect_stats(
        run, passes, labels, task_ids, plan_stats, plan_samples, driver_stats
    )
    read = all_stats[READ_LABEL]
    order = [READ_LABEL, *labels]
    totals = check_accounting(order, all_stats)
    totals["dropped_by_reason"] = {
        f"{label}/{reason}": n for label in order for reason, n in sorted(all_stats[label].drops.items())
    }
    hints = {f"{READ_LABEL}/{r}": read_hint(r, recipe.input) for r in all_stats[READ_LABEL].drops}
    for label, st in zip(labels, stages, strict=True):
        hints |= {f"{label}/{r}": st.drop_hint(r, label) for r in all_stats[label].drops}
    final = run.final
    if final.exists():
        shutil.rmtree(final)
    final.mkdir(parents=True)
    if run.output.exists():
        _link_tree(run.output, final)
    last = passes[-1]
    if not stopped and (last.compute is None or not getattr(stages[last.compute], "terminal", False)):
        for t in task_ids:
            (final / "documents").mkdir(exist_ok=True)
            os.link(run.docs(last.index, t, final=True), final / "documents" / f"{t}.parquet")
    for label in [READ_LABEL, *labels]:
        parts = [
            run.rejected(p.index, t) / f"{label}.jsonl.zst" for p in passes for t in [*task_ids, DECIDE_TASK]
        ]
        parts = [x for x in parts if x.exists()]
        if parts:
            _concat_files(parts, final / "rejected" / f"{label}.jsonl.zst")
    stats: dict[str, Any] = {
        "recipe": {"name": recipe.name, "hash": recipe.hash()},
        "input": {
            "files": len(plan.files),
            "bytes": sum(f.size for f in plan.files),
            "tasks": len(task_ids),
            "file_notes": plan.file_notes,
            "problems": {k: v for k, v in sorted(read.counters.items())},
            "problem_samples": dict(sorted(samples.items())),
        },
        "stages": _stage_entries(recipe, all_stats),
        "totals": totals,
        "length_chars": _length_entries(all_stats, kept_lengths),
    }
    if totals["kept"] == 0:
        message = nothing_left_message(stats, {k: v for k, v in hints.items() if v}, recipe.input)
        stats["outcome"] = {"status": "nothing_left", "message": message}
    manifest: dict[str, Any] = {
        "format_version": 1,
        "dataprep_version": __version__,
        "recipe": {"name": recipe.name, "hash": recipe.hash(), "file": "recipe.yaml"},
        "seed": recipe.seed,
        "inputs": [{"path": f.rel, "bytes": f.size, "sha256": hashes[f.rel]} for f in files],
        "documents": {"read": totals["docs_in"], "kept": totals["kept"], "dropped": totals["dropped"]},
    }
    for part in manifest_parts:
        manifest.update(part)
    write_text_atomic(final / "stats.json", json.dumps(stats, ensure_ascii=False, indent=1))
    write_text_atomic(final / "manifest.json", json.dumps(manifest, ensure_ascii=False, indent=1))
    write_text_atomic(
        final / "recipe.yaml", yaml.safe_dump(recipe.resolved(), allow_unicode=True, sort_keys=False)
    )
    write_report(final, stats, manifest, drawn)
    for entry in sorted(final.iterdir()):
        target = run.out / entry.name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
        os.replace(entry, target)
    final.rmdir()
    return stats


def _collect_stats(
    run: RunDir,
    passes: list[Pass],
    labels: list[str],
    task_ids: list[str],
    plan_stats: StageStats,
    plan_samples: dict[str, list[dict[str, str]]],
    driver_stats: dict[str, StageStats],
) -> tuple[dict[str, StageStats], dict[str, list[dict[str, str]]], Histogram]:
    """(stats per stage label, read first; problem samples; kept lengths) of every completed task
    of ``passes`` and of the driver so far."""
    read, per_stage, samples, kept_lengths = _merge_task_stats(run, passes, labels, task_ids)
    read.merge(plan_stats)
    for kind, items in plan_samples.items():
        samples[kind] = items + samples.get(kind, [])[: ReadReport.SAMPLES_PER_KIND - len(items)]
    for label in labels:
        per_stage[label].merge(driver_stats[label])
    return {READ_LABEL: read, **per_stage}, samples, kept_lengths


def _stage_entries(recipe: Recipe, all_stats: dict[str, StageStats]) -> list[dict[str, Any]]:
    return [
        {"label": label, "stage": name, "kind": kind, **all_stats[label].to_json()}
        for label, name, kind in [(READ_LABEL, "read", "reader")]
        + [(s.label, s.name, registry.get(s.name).kind) for s in recipe.stages]
    ]


def _length_entries(all_stats: dict[str, StageStats], kept_lengths: Histogram) -> dict[str, Any]:
    read = all_stats[READ_LABEL]
    return {
        "read": read.histograms.get("length_chars", Histogram(LENGTH_EDGES)).to_json(),
        "kept": kept_lengths.to_json(),
    }


def _draw_ahead(
    runner: Any,
    recipe: Recipe,
    stats_so_far: Callable[[], tuple[dict[str, StageStats], Any, Histogram]],
) -> Any:
    """Start drawing the report's plots on a worker from the stats known now (every pass done;
    ``stats_so_far``: :func:`_collect_stats` bound to the run), while the last decide runs in the
    driver; returns a future of :func:`report.render_plots`, or
    None when the executor has no idle worker to do it. Plots whose data the last decide changes
    are drawn again at the end (``render`` matches them by spec), so the page does not depend on
    this."""
    submit = getattr(runner, "submit", None)
    if submit is None:
        return None
    from dataprep.report import plot_specs, render_plots

    all_stats, _, kept_lengths = stats_so_far()
    stats = {
        "stages": _stage_entries(recipe, all_stats),
        "length_chars": _length_entries(all_stats, kept_lengths),
    }
    return submit(render_plots, plot_specs(stats))


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
