"""Shared code of the dedup tests: run a small recipe over JSONL files and read the results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from dataprep.docstore import read_rejected
from dataprep.executor import prepare
from dataprep.recipe import parse_recipe

DATA = Path(__file__).parent / "data"


def real_docs() -> list[dict[str, str]]:
    """The real documents of tests/data/dedup_real_docs.jsonl (see tests/data/SOURCES)."""
    with open(DATA / "dedup_real_docs.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def write_inputs(root: Path, files: dict[str, list[dict[str, Any]]]) -> Path:
    """Write {file name: [records]} as JSONL under root/input; returns that directory."""
    inp = root / "input"
    inp.mkdir(parents=True, exist_ok=True)
    for name, rows in files.items():
        with open(inp / name, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return inp


def run(
    inp: Path,
    out: Path,
    stages: list[Any],
    workers: int = 1,
    seed: int = 0,
    input_options: dict[str, Any] | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """``prepare`` of ``stages`` over ``inp`` into ``out``; ``input_options``: the recipe's input block."""
    data: dict[str, Any] = {"name": "t", "seed": seed, "stages": stages}
    if input_options:
        data["input"] = input_options
    recipe = parse_recipe(data, "test")
    return prepare([str(inp)], out, recipe, workers=workers, quiet=True, **kw)


def kept(out: Path) -> list[tuple[str, str]]:
    """(id, text) of the documents in OUT/documents, in output order."""
    rows: list[tuple[str, str]] = []
    for path in sorted((out / "documents").glob("*.parquet")):
        t = pq.read_table(path, columns=["id", "text"])
        rows += list(zip(t.column("id").to_pylist(), t.column("text").to_pylist(), strict=True))
    return rows


def rejected(out: Path, label: str) -> list[dict[str, Any]]:
    path = out / "rejected" / f"{label}.jsonl.zst"
    return list(read_rejected(path)) if path.exists() else []


def stage_stats(stats: dict[str, Any], label: str) -> dict[str, Any]:
    return next(s for s in stats["stages"] if s["label"] == label)


def run_global(stage: Any, tasks: list[list[Any]], work: Path, batch: int = 3) -> tuple[list[list[Any]], Any]:
    """Drive a GlobalStage through compute -> decide -> apply in this process (no executor),
    tasks in order, documents in batches of ``batch``. Returns (results per task, decide stats)."""
    import copy

    from dataprep.stage import DriverContext, StageContext
    from dataprep.stats import StageStats

    work.mkdir(parents=True, exist_ok=True)
    ids = [f"t{t:05d}" for t in range(len(tasks))]

    def ctx(t: int) -> StageContext:
        return StageContext(StageStats(), work, ids[t], t, len(tasks), 0, {})

    for t, docs in enumerate(tasks):
        c = ctx(t)
        stage.begin_task(c)
        for i in range(0, len(docs), batch):
            stage.compute(docs[i : i + batch], c)
        stage.finish_compute(c)
    stats = StageStats()
    stage.decide(DriverContext(work, work / "output", ids, 0, {}, stats, quiet=True))
    results = []
    for t, docs in enumerate(tasks):
        c = ctx(t)
        stage.begin_task(c)
        out: list[Any] = []
        for i in range(0, len(docs), batch):
            out += stage.apply(copy.deepcopy(docs[i : i + batch]), c)
        results.append(out)
    return results, stats


def run_chain(stages: list[Any], tasks: list[list[Any]], work: Path, batch: int = 3) -> list[list[Any]]:
    """Drive global stages one after the other in this process, as the executor's passes do:
    each stage's compute -> decide -> apply over the documents the previous one kept, with the
    artifacts earlier decides published. Returns, per task, each input document's final result:
    the document as the last stage left it, or the first Drop it got."""
    import copy

    from dataprep.document import Drop
    from dataprep.stage import DriverContext, StageContext
    from dataprep.stats import StageStats

    ids = [f"t{t:05d}" for t in range(len(tasks))]
    artifacts: dict[str, Any] = {}
    results: list[list[Any]] = [list(copy.deepcopy(docs)) for docs in tasks]
    for k, stage in enumerate(stages):
        stage_work = work / f"{k:02d}"
        stage_work.mkdir(parents=True, exist_ok=True)

        def ctx(t: int, stage_work: Path = stage_work) -> StageContext:
            return StageContext(StageStats(), stage_work, ids[t], t, len(tasks), 0, artifacts)

        alive = [[r for r in task if not isinstance(r, Drop)] for task in results]
        for t, docs in enumerate(alive):
            c = ctx(t)
            stage.begin_task(c)
            for i in range(0, len(docs), batch):
                stage.compute(docs[i : i + batch], c)
            stage.finish_compute(c)
        stage.decide(
            DriverContext(stage_work, stage_work / "output", ids, 0, artifacts, StageStats(), quiet=True)
        )
        for t, docs in enumerate(alive):
            c = ctx(t)
            stage.begin_task(c)
            applied: list[Any] = []
            for i in range(0, len(docs), batch):
                applied += stage.apply(docs[i : i + batch], c)
            it = iter(applied)
            results[t] = [r if isinstance(r, Drop) else next(it) for r in results[t]]
    return results
