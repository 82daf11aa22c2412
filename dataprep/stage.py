"""The stage protocol and the stage registry.

A recipe is a plain list of stages. Each stage is one class in one file of the ``stages`` package,
registered by name with :func:`register`. The framework never imports a concrete stage: the
registry discovers them by walking the ``stages`` package (and the ``dataprep.stages`` entry-point
group, for plug-ins) the first time a name is looked up.

Kinds of stage:

* ``reader``  - turns one input split into documents (:class:`Reader`).
* ``map``     - transforms or drops documents one batch at a time, 1:1 (:class:`MapStage`).
* ``global``  - needs the whole corpus before it can decide (dedup, tokenizer training, packing):
  ``compute`` per task, then ``decide`` once, then ``apply`` per task in the next pass
  (:class:`GlobalStage`).

Stages declare the artifacts they read and write (``requires`` / ``provides``, e.g. "tokenizer"),
and the recipe loader checks that every requirement is provided by an earlier stage.
Stage objects are built from their parameters alone, in any process, so a local process pool and
a Ray cluster run the same code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import pkgutil
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from dataprep.document import Document, Drop
from dataprep.stats import StageStats

if TYPE_CHECKING:
    from dataprep.executor.base import Executor

StageResult = Document | Drop


class RecipeError(ValueError):
    """The recipe (or a stage's parameters) is invalid; the message says what to change."""


class NothingLeft(RuntimeError):
    """Raised by a global stage's ``decide`` that has nothing left to work on (e.g. packing with no
    document for the train split), after rejecting (:meth:`DriverContext.reject`) every document
    it received: the run ends there, with stats.json and report.html, and fails saying what
    dropped the documents."""


@dataclass
class NoParams:
    """A stage without parameters."""


@dataclass
class StageContext:
    """What a stage sees while it processes one task.

    stats: this stage's counters for this task (merged by the framework across tasks).
    work_dir: the stage's private directory under OUT/work/ (shared by all tasks; use task_id in
      file names). task_id / task_index / num_tasks: the task being processed; task_index orders
      tasks deterministically. artifacts: what earlier stages published (e.g. "tokenizer").
    """

    stats: StageStats
    work_dir: Path
    task_id: str = ""
    task_index: int = 0
    num_tasks: int = 1
    seed: int = 0
    artifacts: dict[str, Any] = field(default_factory=dict)


@dataclass
class DriverContext:
    """What a stage sees in the driver (``setup`` and ``decide``), once per run.

    task_ids: all tasks in order. output_dir: the staging directory of the final outputs;
    files written there appear in OUT/ when the run completes. publish(): make an artifact
    visible to later stages (and to workers of later passes). quiet: no progress bars.
    executor: where the run's work runs (a process pool or a Ray cluster; None: in this
    process); a decide spreads its work over it with :class:`dataprep.decide_jobs.DecideJobs`
    (e.g. one job per hash partition). workers: how many jobs run at once.
    reject(): drop a document while deciding (a terminal stage, in ``decide``).
    input_sample(max_bytes): texts of the run's input, the same whatever the number of workers:
    the first documents of up to INPUT_SAMPLE_TASKS tasks spread evenly over the plan, as the
    reader emits them (before any stage), up to ``max_bytes`` UTF-8 bytes in all (a document that
    crosses a task's share is cut there).
    """

    work_dir: Path
    output_dir: Path
    task_ids: list[str]
    seed: int
    artifacts: dict[str, Any]
    stats: StageStats
    workers: int = 1
    quiet: bool = False  # no progress bars (``prepare --quiet``)
    executor: Executor | None = None
    while_waiting: Callable[[], None] | None = None  # run by run_isolated while the process works
    label: str = ""  # the stage's label in the recipe
    docs_in: int = 0  # in ``decide``: the documents that reached this stage's ``compute``
    rejected: Any = None  # where ``reject`` writes (a RejectedWriter), in ``decide`` only
    unkept_chars: list[int] = field(default_factory=list)  # characters of each document rejected
    input_sample: Callable[[int], list[str]] | None = None  # None: no input to sample (e.g. in tests)

    def publish(self, name: str, value: Any) -> None:
        self.artifacts[name] = value

    def reject(self, drop: Drop, chars: int | None = None) -> None:
        """Drop, in ``decide``, a document that reached this terminal stage and was so far
        counted as kept (e.g. packing's dropped tail): counted under ``drop.reason``, taken off
        docs_out, written to rejected/. ``chars``: its characters as the stage received them
        (default: those of ``drop.doc.text``)."""
        if self.rejected is None:
            raise RuntimeError(f"{self.label}: documents can be rejected only while deciding")
        chars = len(drop.doc.text) if chars is None else chars
        self.stats.drop(drop.reason, chars, drop.doc.where)
        self.stats.docs_out -= 1
        self.stats.chars_out -= chars
        self.unkept_chars.append(chars)
        self.rejected.write(drop, self.label)

    def run_isolated(self, fn: Callable[[Any], Any], arg: Any, process: IsolatedProcess | None = None) -> Any:
        """fn(arg) in a fresh process that exits afterwards, so the memory it used goes back to the
        system (e.g. tokenizer training); fn must be a module-level function. ``process``: one
        started ahead (:class:`IsolatedProcess`), else a new one. Meanwhile the driver runs
        ``while_waiting`` (the run's warm-ups of later stages, see :meth:`Stage.warm_ups`)."""
        return (process or IsolatedProcess()).run(fn, arg, self.while_waiting)


class IsolatedProcess:
    """A fresh (spawned) process for one call, after which it exits. Created ahead of the call
    with a ``warm_up`` (a module-level function of one ignored argument, e.g. imports), its
    start-up overlaps whatever the driver does until then. It ends when the process that created
    it does, killed included (:func:`dataprep.worker_env.exit_with_parent`)."""

    def __init__(self, warm_up: Callable[[Any], Any] | None = None):
        import multiprocessing as mp
        import os
        from concurrent.futures import ProcessPoolExecutor

        from dataprep.worker_env import exit_with_parent

        self._pool = ProcessPoolExecutor(
            1, mp_context=mp.get_context("spawn"), initializer=exit_with_parent, initargs=(os.getpid(),)
        )
        if warm_up is not None:
            self._pool.submit(warm_up, None)  # the process starts with its first call

    def close(self) -> None:
        """End the process without a call."""
        self._pool.shutdown()

    def run(self, fn: Callable[[Any], Any], arg: Any, while_waiting: Callable[[], None] | None = None) -> Any:
        """fn(arg) in the process, which then exits; ``while_waiting()`` runs here meanwhile."""
        try:
            future = self._pool.submit(fn, arg)
            if while_waiting is not None:
                while_waiting()
            return future.result()
        finally:
            self._pool.shutdown()


class Stage:
    """Base of all stages. Subclasses set ``name``, ``kind``, ``Params`` and a one-line docstring."""

    name: ClassVar[str] = ""
    kind: ClassVar[str] = ""
    Params: ClassVar[type] = NoParams
    requires: ClassVar[tuple[str, ...]] = ()
    provides: ClassVar[tuple[str, ...]] = ()

    def __init__(self, params: Any):
        self.params = params

    def setup(self, ctx: DriverContext) -> None:
        """Driver-side check before any work starts (fail fast: missing files, bad settings)."""

    def prepare_apply(self, ctx: DriverContext) -> None:
        """Called in the driver before the pass that runs this stage's ``process`` / ``apply``
        (after every decide before it, also when that pass is already done in a resumed run):
        e.g. collect a check ``setup`` started on the workers and publish its result."""

    def warm_ups(self) -> list[Callable[[Any], Any]]:
        """Slow preparations of the processes that will do this stage's decide-time work (the driver
        or the pool's workers; module-level functions of one ignored argument, e.g. a heavy import).
        The run may call them ahead, while it waits on something else; they must not change any
        output."""
        return []

    def begin_task(self, ctx: StageContext) -> None:
        """Called in the worker before the first batch of every task: reset per-task state."""

    def drop_hint(self, reason: str, label: str) -> str | None:
        """What to change in the recipe when this stage (``label`` in the recipe) drops most
        documents for ``reason``: one short clause, or None when nothing here is to change (e.g.
        a deduplication keeps one of each). Default: loosen its parameters or remove it."""
        values = [f"{name}={getattr(self.params, name)!r}" for name, *_ in param_fields(type(self.params))]
        if not values:
            return f"take {label} out of the recipe"
        shown = ", ".join(values[:4]) + (", ..." if len(values) > 4 else "")
        return f"loosen {label} ({shown}; `dataprep stages` lists them) or take it out of the recipe"


class MapStage(Stage):
    """Transforms or drops documents; exactly one result per input document, in order."""

    kind = "map"

    def process(self, batch: list[Document], ctx: StageContext) -> list[StageResult]:
        raise NotImplementedError


class ScoredFilter(MapStage):
    """A filter whose statistics stay inspectable (compute, then decide).

    ``score`` returns named statistics of a document (``score_batch`` may compute a whole batch at
    once); ``decide`` turns them into a drop verdict or None. A verdict is ``(reason, score)`` or
    ``(reason, score, detail)``. Scores are stored under ``doc.meta["scores"][<stage name>]`` when
    ``keep_scores`` is on, and histogrammed into stats with ``score_edges`` so thresholds can be
    tuned.
    """

    score_edges: ClassVar[dict[str, list[float]]] = {}
    keep_scores: ClassVar[bool] = False

    def score(self, doc: Document) -> dict[str, float]:
        raise NotImplementedError

    def score_batch(self, batch: list[Document]) -> list[dict[str, float]]:
        """Scores of every document of ``batch``, in order (default: ``score`` per document)."""
        return [self.score(doc) for doc in batch]

    def decide(self, scores: dict[str, float]) -> tuple[str, float] | tuple[str, float, str] | None:
        """(reason, the score that decided[, detail]) to drop, or None to keep."""
        raise NotImplementedError

    def process(self, batch: list[Document], ctx: StageContext) -> list[StageResult]:
        all_scores = self.score_batch(batch)
        for key, edges in self.score_edges.items():
            values = [s[key] for s in all_scores if key in s]
            if values:
                ctx.stats.histogram(key, edges).add(values)
        out: list[StageResult] = []
        for doc, scores in zip(batch, all_scores, strict=True):
            if self.keep_scores:
                doc.meta.setdefault("scores", {})[self.name] = scores
            verdict = self.decide(scores)
            if verdict is None:
                out.append(doc)
            else:
                detail = verdict[2] if len(verdict) > 2 else ""  # type: ignore[misc]
                out.append(Drop(doc, verdict[0], score=verdict[1], detail=detail))
        return out


class GlobalStage(Stage):
    """A stage that must see the whole corpus before deciding.

    Phases: ``compute`` sees every document of a task in order (and must not change them),
    ``finish_compute`` flushes the task's state under ``ctx.work_dir``; ``decide`` runs once in the
    driver after all tasks; ``apply`` then sees the same documents, in the same order, in the next
    pass. A ``terminal`` stage consumes the documents (e.g. packing into shards): it has no apply.
    When ``needs_global_pass()`` is False (e.g. a tokenizer given as a file), the framework skips
    compute/decide and runs ``apply`` as a map stage.
    """

    kind = "global"
    terminal: ClassVar[bool] = False

    def needs_global_pass(self) -> bool:
        return True

    def compute(self, batch: list[Document], ctx: StageContext) -> None:
        raise NotImplementedError

    def finish_compute(self, ctx: StageContext) -> None:
        """Called once per task after its last batch."""

    def prepare_decide(self, ctx: DriverContext) -> None:
        """Called in the driver as the pass that ends with this stage's ``compute`` starts (when
        ``decide`` has not run yet): start slow preparations of ``decide``, e.g. its process."""

    def decide(self, ctx: DriverContext) -> dict[str, Any]:
        """Runs once; returns entries for manifest.json (may be empty)."""
        raise NotImplementedError

    def apply(self, batch: list[Document], ctx: StageContext) -> list[StageResult]:
        return list(batch)


@dataclass(frozen=True)
class InputSplit:
    """A unit of input work: a file, or a byte range of an uncompressed line-oriented file.

    path: absolute path. rel: path relative to the input root (used in document ids).
    start/end: byte range (end = -1 means to the end). first_line: 1-based line number at start.
    nbytes: on-disk bytes this split accounts for (progress and scheduling); for a group, all of
    its parts' bytes.
    sha256: the sha256 (hex) of the split's on-disk bytes when planning read them all (a small
    file, a range of a file cut at line starts), which the reader checks as it reads; "" when not.
    more: further splits of the same task, read after this one in order (small files grouped
    into one task of about the target size); each as the list of its first seven or eight fields.
    """

    path: str
    rel: str
    reader: str
    start: int = 0
    end: int = -1
    first_line: int = 1
    nbytes: int = 0
    sha256: str = ""
    more: list[list[Any]] = field(default_factory=list)

    def parts(self) -> list[InputSplit]:
        """The splits this task reads, in order (itself alone unless it is a group)."""
        if not self.more:
            return [self]
        nbytes = self.nbytes - sum(int(m[6]) for m in self.more)
        first = InputSplit(
            self.path, self.rel, self.reader, self.start, self.end, self.first_line, nbytes, self.sha256
        )
        return [first, *(InputSplit(*m) for m in self.more)]


def read_task(split: InputSplit, reader: Callable[[str], Reader], report: ReadReport) -> Iterator[Document]:
    """The documents of a task: each of ``split.parts()`` read by ``reader(part.reader)`` in
    order. ``report.position`` counts on-disk bytes from the task's start (the parts before the
    current one in full)."""
    done = 0
    for part in split.parts():
        report.base = done
        report.position = 0
        yield from reader(part.reader).read(part, report)
        done += part.nbytes
    report.base = 0
    report.position = done


class InputError(Exception):
    """Bad input under ``on_error: stop``; the message names the file and line."""


class Reader(Stage):
    """Turns one input split into documents, reporting bad records through ``report``.

    extensions: logical suffixes this reader handles (after removing .gz/.zst).
    splittable: an uncompressed file may be cut into line-aligned byte ranges.
    """

    kind = "reader"
    extensions: ClassVar[tuple[str, ...]] = ()
    splittable: ClassVar[bool] = False

    def read(self, split: InputSplit, report: ReadReport) -> Iterator[Document]:
        raise NotImplementedError

    @classmethod
    def chunkable(cls, params: Any) -> bool:
        """True when a decompressed copy of the file may be cut at any line end into splits."""
        return False


class ReadReport:
    """Collects a reader's bad-input events for one split and applies the error policy.

    Errors (malformed record, missing field, over-long line, binary file, undecodable text under
    ``invalid_utf8: drop``) are recorded with file and line; under ``on_error: stop`` the first one
    raises :class:`InputError`. Repairs (replacing invalid UTF-8, stripping NUL bytes) are counted
    and sampled but never stop a run. Record-level errors count as drops of the reader stage so the
    accounting stays exact; file-level ones (binary, empty, unreadable) are counted per file.
    """

    SAMPLES_PER_KIND = 20

    def __init__(self, stats: StageStats, on_error: str, rejected: Any = None):
        self.stats = stats
        self.on_error = on_error
        self.rejected = rejected
        self.samples: dict[str, list[dict[str, Any]]] = {}
        self.position = 0  # on-disk bytes consumed so far in the current split (progress)
        self.base = 0  # on-disk bytes of the task's parts before the current one (groups)
        # [rel, start, end, sha256] of every input byte range read whole (see LineReader.lines)
        self.read_sha256: list[list[Any]] = []

    def _sample(self, kind: str, where: str, message: str) -> None:
        bucket = self.samples.setdefault(kind, [])
        if len(bucket) < self.SAMPLES_PER_KIND:
            bucket.append({"where": where, "message": message})

    def record_error(self, kind: str, where: str, message: str, raw: bytes | str = b"") -> None:
        """A record that cannot become a document: dropped under ``kind`` (or stop the run)."""
        self.stats.docs_in += 1
        if self.on_error == "stop":
            raise InputError(
                f"{where}: {message} (input.on_error is 'stop'; fix the input or set it to 'skip')"
            )
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        self.stats.drop(kind, len(text), where)
        self._sample(kind, where, message)
        if self.rejected is not None:
            self.rejected.write(
                Drop(
                    Document(id=where, text=text[:10_000], source=where.rsplit(":", 1)[0]),
                    kind,
                    detail=message,
                ),
                "read",
            )

    def file_error(self, kind: str, where: str, message: str) -> None:
        """A whole file skipped (binary, unreadable) or noted (empty); counted per kind."""
        self.stats.count(f"files.{kind}")
        if self.on_error == "stop" and kind != "empty_file":
            raise InputError(
                f"{where}: {message} (input.on_error is 'stop'; fix the input or set it to 'skip')"
            )
        self._sample(kind, where, message)

    def repair(self, kind: str, where: str, message: str) -> None:
        """A record kept after a repair (e.g. invalid UTF-8 replaced): counted and sampled."""
        self.stats.count(f"repaired.{kind}")
        self._sample(kind, where, message)

    def emit(self, doc: Document) -> Document:
        self.stats.docs_in += 1
        self.stats.docs_out += 1
        self.stats.chars_out += len(doc.text)
        self.stats.chars_in += len(doc.text)
        return doc


# ---------------------------------------------------------------------------------------------
# Registry

_REGISTRY: dict[str, type] = {}
_DISCOVERED = False


def register(cls: type) -> type:
    """Class decorator: make a stage (or reader) available to recipes by its name."""
    name = getattr(cls, "name", "")
    if not name:
        raise TypeError(f"{cls.__qualname__} has no 'name'")
    existing = _REGISTRY.get(name)
    if existing is not None and existing is not cls and existing.__qualname__ != cls.__qualname__:
        raise TypeError(
            f"stage name {name!r} is registered twice ({existing.__module__} and {cls.__module__})"
        )
    _REGISTRY[name] = cls
    return cls


def _discover() -> None:
    global _DISCOVERED
    if _DISCOVERED:
        return
    _DISCOVERED = True
    package = importlib.import_module("stages")
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"stages.{info.name}")
    for ep in entry_points(group="dataprep.stages"):
        ep.load()


def get(name: str) -> type:
    """The registered class for ``name``; RecipeError listing the known names if absent."""
    _discover()
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise RecipeError(f"unknown stage {name!r}; known stages: {known}") from None


def all_stages() -> dict[str, type]:
    _discover()
    return dict(sorted(_REGISTRY.items()))


def readers() -> list[type[Reader]]:
    return [c for c in all_stages().values() if getattr(c, "kind", "") == "reader"]


# ---------------------------------------------------------------------------------------------
# Parameters


def param_fields(params_cls: type) -> list[tuple[str, Any, Any, str]]:
    """[(name, type, default, help)] of a Params dataclass; default is MISSING when required."""
    hints = typing.get_type_hints(params_cls)
    out = []
    for f in dataclasses.fields(params_cls):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        out.append((f.name, hints[f.name], default, f.metadata.get("help", "")))
    return out


def type_name(tp: Any) -> str:
    if typing.get_origin(tp) is Literal:
        return "|".join(str(a) for a in typing.get_args(tp))
    return str(tp).replace("typing.", "") if not isinstance(tp, type) else tp.__name__


def _check_value(where: str, tp: Any, value: Any) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin is Literal:
        if value not in args:
            raise RecipeError(f"{where}: {value!r} is not one of {', '.join(map(repr, args))}")
        return value
    if origin in (typing.Union, types.UnionType):
        for a in args:
            if a is type(None):
                if value is None:
                    return None
                continue
            with contextlib.suppress(RecipeError):
                return _check_value(where, a, value)
        raise RecipeError(f"{where}: {value!r} does not match {type_name(tp)}")
    if origin is list:
        if not isinstance(value, list):
            raise RecipeError(f"{where}: expected a list, got {value!r}")
        return [_check_value(f"{where}[{i}]", args[0] if args else Any, v) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise RecipeError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise RecipeError(f"{where}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise RecipeError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise RecipeError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise RecipeError(f"{where}: expected a string, got {value!r}")
        return value
    return value


def build_params(params_cls: type, raw: dict[str, Any] | None, where: str) -> Any:
    """Validate ``raw`` against a Params dataclass (unknown keys, types, required fields)."""
    raw = dict(raw or {})
    fields = {name: (tp, default) for name, tp, default, _ in param_fields(params_cls)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        valid = ", ".join(sorted(fields)) or "(none)"
        raise RecipeError(f"{where}: unknown parameter(s) {', '.join(unknown)}; valid: {valid}")
    values = {}
    for name, (tp, default) in fields.items():
        if name in raw:
            values[name] = _check_value(f"{where}.{name}", tp, raw[name])
        elif default is dataclasses.MISSING:
            raise RecipeError(f"{where}: missing required parameter {name!r}")
    try:
        params = params_cls(**values)
    except (TypeError, ValueError) as e:
        raise RecipeError(f"{where}: {e}") from None
    validate = getattr(params, "validate", None)
    if validate is not None:
        try:
            validate()
        except ValueError as e:
            raise RecipeError(f"{where}: {e}") from None
    return params


def param(default: Any = dataclasses.MISSING, help: str = "", **kw: Any) -> Any:
    """A dataclass field with a help string, shown by ``dataprep stages``."""
    if isinstance(default, list | dict):
        return field(default_factory=lambda d=default: type(d)(d), metadata={"help": help}, **kw)
    return field(default=default, metadata={"help": help}, **kw)
