"""Learned quality score: a fastText classifier (``dataprep train-quality``) scores every document.

score:   the model's probability of "quality" for the document's first ``max_chars`` characters
         (features: ``stages/_quality_features``); written to
         ``doc.meta["quality"]`` (and ``doc.meta["scores"]["quality_classifier"]`` with
         ``keep_scores``), histogrammed as ``quality`` in stats.json and the report.
decide:  ``threshold``: documents scoring below it are dropped as ``low_quality`` (a map stage: no
         extra pass). ``top_fraction``: the best-scored fraction of each group (``group_by``: the
         source's directory, the source file, or all documents) is kept. That needs the whole
         corpus: compute scores every document and keeps its score and a histogram of its group's
         scores (65,536 bins over [0, 1]) per task; decide sets each group's threshold, the lowest
         bin whose documents and those above make at least ``ceil(top_fraction * n)``
         (documents tied in that bin are all kept, so a group keeps at least its share and at
         most one bin more); apply drops the others, reading the scores kept by compute.
model:   ``demo`` = the demonstration model shipped in stages/data (see its card: edited prose
         against spam, keyword dumps, boilerplate and mojibake, for showing the stage, not for
         deciding what quality means for a corpus), or the path of a model: ``.npz`` (what
         ``train-quality`` writes) or a fastText ``.bin`` / ``.ftz``. setup loads it once in the
         driver (fail fast) and writes into the stage's work directory, where the workers load
         it, ``model.npz`` when the model has the linear form (``stages/_quality_linear``: an
         ``.npz``, or a fastText model that is unquantized, softmax over the two labels, without
         subword n-grams: converted), scored in numpy, a batch at once; otherwise ``model.bin``,
         scored by fastText's ``predict`` one document at a time, about 10x slower (setup says
         why in an example). Counters ``scored_numpy`` / ``scored_fasttext``: documents each way.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from dataprep.document import Document, Drop
from dataprep.stage import (
    DriverContext,
    GlobalStage,
    RecipeError,
    StageContext,
    StageResult,
    param,
    register,
)
from stages._filter_base import SHARE_EDGES

DEMO_MODEL = Path(__file__).parent / "data" / "quality_demo.npz"
BINS = 1 << 16
EXAMPLE_CHARS = 300
_MODELS: dict[tuple[str, int, int], Any] = {}  # loaded models per process: path, mtime, size
LINEAR_FILE, FASTTEXT_FILE = "model.npz", "model.bin"  # in the work directory


@dataclass
class QualityParams:
    model: str = param(
        help="quality model (.npz from `dataprep train-quality`, or fastText .bin/.ftz), or 'demo'"
    )
    threshold: float = param(0.5, help="drop documents scoring below this (when top_fraction is not set)")
    top_fraction: float | None = param(
        None, help="instead of threshold: keep this best-scored share of each group (a global pass)"
    )
    group_by: Literal["source_dir", "source", "all"] = param(
        "source_dir", help="groups for top_fraction: the source's directory, the source file, or one group"
    )
    max_chars: int = param(4000, help="characters read from the start of each document (as in training)")
    keep_scores: bool = param(False, help="also store the score in doc.meta['scores']")
    examples: int = param(3, help="dropped documents recorded per task for report.html")

    def validate(self) -> None:
        if not 0 <= self.threshold <= 1:
            raise ValueError("threshold must be between 0 and 1")
        if self.top_fraction is not None and not 0 < self.top_fraction <= 1:
            raise ValueError("top_fraction must be in (0, 1]")
        if self.max_chars < 1:
            raise ValueError("max_chars must be positive")


def resolve_model(ref: str) -> Path:
    """The model file ``ref`` names ('demo': the shipped demonstration model)."""
    return DEMO_MODEL if ref == "demo" else Path(ref).expanduser()


def _model(path: Path) -> Any:
    from stages._quality_model import load_model

    st = path.stat()
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _MODELS:
        _MODELS[key] = load_model(path)
    return _MODELS[key]


def _write_if_changed(target: Path, data: bytes) -> None:
    """``data`` at ``target``, written (atomically) only when it holds something else."""
    from dataprep.io import atomic_write

    if not target.exists() or target.read_bytes() != data:
        with atomic_write(target) as f:
            f.write(data)


def score_bins(scores: np.ndarray) -> np.ndarray:
    """int64 bin of each score in [0, 1]: floor(score * 65536), 1.0 in the last bin."""
    return np.minimum((np.asarray(scores, dtype=np.float64) * BINS).astype(np.int64), BINS - 1)


def top_threshold_bin(counts: np.ndarray, fraction: float) -> int:
    """The highest bin b with at least ceil(fraction * n) documents in bins >= b (0 when empty)."""
    n = int(counts.sum())
    if n == 0:
        return 0
    need = math.ceil(fraction * n - 1e-9)
    at_or_above = np.cumsum(counts[::-1])[::-1]  # non-increasing in b
    return int(np.count_nonzero(at_or_above >= need)) - 1


@register
class QualityClassifier(GlobalStage):
    """Score documents with a fastText quality model; keep by threshold or top fraction per group."""

    name = "quality_classifier"
    Params = QualityParams

    @staticmethod
    def train_command(
        positive: list[str],
        negative: list[str],
        out: str,
        *,
        options: dict[str, Any],
        **kwargs: Any,
    ) -> int:
        """``dataprep train-quality``: train a model on the positive / negative files, print its
        held-out figures and write it with its card (``stages/_quality_training``); the exit code.
        ``options``: the fields of TrainOptions; ``kwargs``: the rest of train_quality_command's."""
        from stages._quality_training import TrainOptions, train_quality_command

        return train_quality_command(positive, negative, out, options=TrainOptions(**options), **kwargs)

    def __init__(self, params: QualityParams):
        super().__init__(params)
        self._scores: list[np.ndarray] = []
        self._groups: dict[str, list[np.ndarray]] = {}
        self._applied: np.ndarray | None = None
        self._row = 0
        self._thresholds: dict[str, int] | None = None

    def needs_global_pass(self) -> bool:
        return self.params.top_fraction is not None

    def drop_hint(self, reason: str, label: str) -> str | None:
        p: QualityParams = self.params
        knob = f"top_fraction (now {p.top_fraction})" if p.top_fraction else f"threshold (now {p.threshold})"
        return (
            f"loosen {label}'s {knob}, or train a model on your own positives "
            "(`dataprep train-quality`) instead of this one"
        )

    def setup(self, ctx: DriverContext) -> None:
        from stages import _quality_linear

        path = resolve_model(self.params.model)
        if not path.is_file():
            raise RecipeError(
                f"{ctx.label}: model {self.params.model!r} not found ({path}); train one with "
                "`dataprep train-quality --positive ... --negative ... --out MODEL.npz` or use 'demo'"
            )
        try:
            model = _model(path)
        except (ValueError, RuntimeError, OSError) as e:
            raise RecipeError(f"{ctx.label}: {path} is not a quality model: {e}") from None
        if isinstance(model, _quality_linear.LinearModel):
            data, keep, stale = path.read_bytes(), LINEAR_FILE, FASTTEXT_FILE
        else:
            linear, why = _quality_linear.from_fasttext(model, self.params.max_chars)
            if linear is not None:  # converted once here; the workers load the .npz
                data, keep, stale = _quality_linear.to_bytes(linear), LINEAR_FILE, FASTTEXT_FILE
            else:
                data, keep, stale = path.read_bytes(), FASTTEXT_FILE, LINEAR_FILE
                ctx.stats.add_example(
                    "scored by fastText's predict, one document at a time (about 10x slower than numpy)",
                    [{"label": path.name, "text": f"the model has no linear form: {why}"}],
                )
        _write_if_changed(ctx.work_dir / keep, data)
        (ctx.work_dir / stale).unlink(missing_ok=True)

    def _score(self, batch: list[Document], ctx: StageContext) -> np.ndarray:
        from stages import _quality_linear
        from stages._quality_model import score_texts

        path = ctx.work_dir / LINEAR_FILE
        if not path.exists():
            path = ctx.work_dir / FASTTEXT_FILE
        if not path.exists():  # used outside a run (no setup): the model as named
            path = resolve_model(self.params.model)
        model = _model(path)
        linear = isinstance(model, _quality_linear.LinearModel)
        ctx.stats.count("scored_numpy" if linear else "scored_fasttext", len(batch))
        return score_texts(model, [d.text for d in batch], self.params.max_chars)

    def _group(self, doc: Document) -> str:
        by = self.params.group_by
        if by == "all":
            return ""
        if by == "source":
            return doc.source
        return doc.source.rsplit("/", 1)[0] if "/" in doc.source else ""

    # -- global pass (top_fraction)

    def begin_task(self, ctx: StageContext) -> None:
        self._scores, self._groups, self._row = [], {}, 0
        self._applied, self._thresholds = None, None

    def compute(self, batch: list[Document], ctx: StageContext) -> None:
        scores = self._score(batch, ctx)
        self._scores.append(scores)
        bins = score_bins(scores)
        for doc, b in zip(batch, bins.tolist(), strict=True):
            self._groups.setdefault(self._group(doc), []).append(np.int64(b))

    def finish_compute(self, ctx: StageContext) -> None:
        scores = np.concatenate(self._scores) if self._scores else np.zeros(0)
        np.save(ctx.work_dir / f"{ctx.task_id}.scores.npy", scores)
        hist = {}
        for group, values in sorted(self._groups.items()):
            b, c = np.unique(np.asarray(values, dtype=np.int64), return_counts=True)
            hist[group] = [b.tolist(), c.tolist()]
        (ctx.work_dir / f"{ctx.task_id}.groups.json").write_text(json.dumps(hist, ensure_ascii=False))
        self._scores, self._groups = [], {}

    def decide(self, ctx: DriverContext) -> dict[str, Any]:
        p: QualityParams = self.params
        assert p.top_fraction is not None
        counts: dict[str, np.ndarray] = {}
        for t in ctx.task_ids:
            path = ctx.work_dir / f"{t}.groups.json"
            for group, (bins, c) in json.loads(path.read_text()).items():
                dense = counts.setdefault(group, np.zeros(BINS, dtype=np.int64))
                np.add.at(dense, np.asarray(bins, dtype=np.int64), np.asarray(c, dtype=np.int64))
            path.unlink()
        thresholds = {g: top_threshold_bin(c, p.top_fraction) for g, c in sorted(counts.items())}
        (ctx.work_dir / "thresholds.json").write_text(json.dumps(thresholds, ensure_ascii=False))
        for group, b in thresholds.items():
            kept = int(counts[group][b:].sum())
            ctx.stats.add_example(
                f"top_fraction {p.top_fraction} of {p.group_by} {group or '(all)'!r}",
                [
                    {"label": "keeps quality >=", "text": f"{b / BINS:.4f}"},
                    {"label": "kept", "text": f"{kept:,} of {int(counts[group].sum()):,}"},
                ],
            )
        return {"quality_thresholds": {g or "(all)": round(b / BINS, 6) for g, b in thresholds.items()}}

    # -- apply (also the map step when there is no global pass)

    def apply(self, batch: list[Document], ctx: StageContext) -> list[StageResult]:
        p: QualityParams = self.params
        if p.top_fraction is None:
            scores = self._score(batch, ctx)
        else:
            if self._applied is None:
                scores_path = ctx.work_dir / f"{ctx.task_id}.scores.npy"
                self._applied = np.load(scores_path)
                self._thresholds = json.loads((ctx.work_dir / "thresholds.json").read_text())
                scores_path.unlink()
            scores = self._applied[self._row : self._row + len(batch)]
            self._row += len(batch)
        ctx.stats.histogram("quality", SHARE_EDGES).add(scores)
        bins = score_bins(scores)
        out: list[StageResult] = []
        rounded = np.round(scores, 6).tolist()
        for doc, score, q, b in zip(batch, scores.tolist(), rounded, bins.tolist(), strict=True):
            doc.meta["quality"] = q
            if p.keep_scores:
                doc.meta.setdefault("scores", {})[self.name] = {"quality": q}
            if p.top_fraction is None:
                if score >= p.threshold:
                    out.append(doc)
                    continue
                detail = f"quality {q:.4f} < {p.threshold}"
            else:
                assert self._thresholds is not None
                group = self._group(doc)
                tb = self._thresholds[group]
                if b >= tb:
                    out.append(doc)
                    continue
                detail = f"quality {q:.4f} < {tb / BINS:.4f} (top {p.top_fraction} of {group or 'all'!r})"
            out.append(Drop(doc, "low_quality", score=q, detail=detail))
            if sum(1 for e in ctx.stats.examples if e["title"].startswith("dropped")) < p.examples:
                ctx.stats.add_example(
                    f"dropped at quality {q:.4f}", [{"label": doc.id, "text": doc.text[:EXAMPLE_CHARS]}]
                )
        return out
