"""Merging what the tasks and the decides counted: per-stage stats, problem samples, kept lengths
and CPU seconds, always in task order (so 1 and N workers give the same stats.json)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from dataprep.executor.context import RunContext
from dataprep.executor.passes import IO_CPU, READ_LABEL, Pass, RunDir
from dataprep.recipe import Recipe
from dataprep.stage import registry
from dataprep.stage.reader import ReadReport
from dataprep.stats import LENGTH_EDGES, Histogram, StageStats

Samples = dict[str, list[dict[str, str]]]


def merge_task_stats(
    run: RunDir, passes: list[Pass], labels: list[str], task_ids: list[str]
) -> tuple[StageStats, dict[str, StageStats], Samples, Histogram]:
    """(read stats, stats per stage label, problem samples, kept lengths) from the completion
    markers of every task of ``passes`` (kept lengths: of the last of them, less the documents
    its decide dropped)."""
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


def read_file_notes(run: RunDir, task_ids: list[str]) -> list[dict[str, str]]:
    """The notes (file, kind, message) of the files the completed pass-0 tasks read whole but
    found not to be text (small files planning left unsniffed), in task order."""
    notes: list[dict[str, str]] = []
    for t in task_ids:
        marker = run.marker(0, t)
        if marker.exists():
            notes += json.loads(marker.read_text()).get("file_notes", [])
    return notes


def file_notes(ctx: RunContext) -> list[dict[str, str]]:
    """stats.json's ``input.file_notes``: a note per input entry that yielded no document, in
    the order of the files: planning's (entries that are not regular files first) with those
    its pass-0 tasks found (:func:`read_file_notes`)."""
    found = read_file_notes(ctx.run, ctx.task_ids)
    if not found:
        return ctx.plan.file_notes
    order = {f.rel: k for k, f in enumerate(ctx.plan.files)}
    return sorted([*ctx.plan.file_notes, *found], key=lambda note: order.get(note["file"], -1))


def cpu_seconds(run: RunDir, passes: list[Pass], task_ids: list[str]) -> dict[str, float]:
    """CPU seconds summed over the tasks, per stage label and per pass for reading, parsing and
    writing documents ("passN.io"); rounded to ms."""
    total: Counter[str] = Counter()
    for p in passes:
        for t in task_ids:
            marker = json.loads(run.marker(p.index, t).read_text())
            for label, seconds in marker.get("cpu_seconds", {}).items():
                total[f"pass{p.index}.io" if label == IO_CPU else label] += seconds
    return {k: round(v, 3) for k, v in total.items()}


def collect_stats(ctx: RunContext, passes: list[Pass]) -> tuple[dict[str, StageStats], Samples, Histogram]:
    """(stats per stage label, read first; problem samples; kept lengths) of every completed task
    of ``passes`` and of the driver so far."""
    read, per_stage, samples, kept_lengths = merge_task_stats(ctx.run, passes, ctx.labels, ctx.task_ids)
    read.merge(ctx.plan_stats)
    for kind, items in ctx.plan_samples.items():
        samples[kind] = items + samples.get(kind, [])[: ReadReport.SAMPLES_PER_KIND - len(items)]
    for label in ctx.labels:
        per_stage[label].merge(ctx.driver_stats[label])
    return {READ_LABEL: read, **per_stage}, samples, kept_lengths


def stage_entries(recipe: Recipe, all_stats: dict[str, StageStats]) -> list[dict[str, Any]]:
    """stats.json's ``stages``: one entry per stage label, the reader first."""
    return [
        {"label": label, "stage": name, "kind": kind, **all_stats[label].to_json()}
        for label, name, kind in [(READ_LABEL, "read", "reader")]
        + [(s.label, s.name, registry.get(s.name).kind) for s in recipe.stages]
    ]


def length_entries(all_stats: dict[str, StageStats], kept_lengths: Histogram) -> dict[str, Any]:
    """stats.json's ``length_chars``: lengths of the documents read and of those kept."""
    read = all_stats[READ_LABEL]
    return {
        "read": read.histograms.get("length_chars", Histogram(LENGTH_EDGES)).to_json(),
        "kept": kept_lengths.to_json(),
    }
