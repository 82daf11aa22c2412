"""The stage protocol: the kinds of stage a recipe lists.

* ``map``     - transforms or drops documents one batch at a time, 1:1 (:class:`MapStage`, and
  :class:`ScoredFilter` for a filter whose scores stay inspectable).
* ``global``  - needs the whole corpus before it can decide (dedup, tokenizer training, packing):
  ``compute`` per task, then ``decide`` once, then ``apply`` per task in the next pass
  (:class:`GlobalStage`).
* ``reader``  - turns one input split into documents (:class:`dataprep.stage.reader.Reader`).

Stages declare the artifacts they read and write (``requires`` / ``uses`` / ``provides``, names of
:data:`dataprep.stage.artifacts.ARTIFACTS`), and the recipe loader checks that every requirement is
provided by an earlier stage. Stage objects are built from their parameters alone, in any process,
so a local process pool and a Ray cluster run the same code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from dataprep.document import Document, Drop
from dataprep.stage.context import DriverContext, StageContext
from dataprep.stage.params import NoParams, param_fields

StageResult = Document | Drop


class NothingLeft(RuntimeError):
    """Raised by a global stage's ``decide`` that has nothing left to work on (e.g. packing with no
    document for the train split), after rejecting (:meth:`DriverContext.reject`) every document
    it received: the run ends there, with stats.json and report.html, and fails saying what
    dropped the documents."""


class Stage:
    """Base of all stages. Subclasses set ``name``, ``kind``, ``Params`` and a one-line docstring."""

    name: ClassVar[str] = ""
    kind: ClassVar[str] = ""
    Params: ClassVar[type] = NoParams
    # artifacts (names of dataprep.stage.artifacts.ARTIFACTS): those it cannot run without, those
    # it reads when an earlier stage (or the run) provides them, those it publishes
    requires: ClassVar[tuple[str, ...]] = ()
    uses: ClassVar[tuple[str, ...]] = ()
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
        """Slow preparations of the processes that will do this stage's work (the driver or the
        pool's workers; picklable callables of one ignored argument, the same objects at every
        call, e.g. a heavy import or building a tokenizer's engine). The run may call them ahead:
        while it waits on something else, and at the end of the pass before the stage's tasks or
        its decide. They must not change any output."""
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
