"""The end of a run: stats.json, manifest.json, recipe.yaml and report.html assembled in
OUT/.final and moved into OUT only when complete; and the report's plots drawn ahead on a worker."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections import Counter
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from dataprep import __version__
from dataprep.docstore import copy_parquet_kept, parquet_keys, read_rejected, refused, sha256_of
from dataprep.executor.context import RunContext
from dataprep.executor.merge import collect_stats, file_notes, length_entries, stage_entries
from dataprep.executor.passes import DECIDE_TASK, OUTPUTS_RECORD, READ_LABEL, Pass
from dataprep.formats.manifest import Manifest, manifest_text
from dataprep.io import write_text_atomic
from dataprep.outcome import nothing_left_message, read_hint
from dataprep.stats import check_accounting


def finalize(
    ctx: RunContext, passes: list[Pass], drawn: dict[str, str] | None = None, stopped: bool = False
) -> dict[str, Any]:
    """Assemble stats.json, manifest.json, recipe.yaml, report.html (with the plots drawn ahead of
    time in ``drawn``, if any) and move the outputs into OUT; returns stats.json's content.
    ``passes``: those that ran; ``stopped``: the run ended early with no document left (no
    documents/ output). When no document is left, stats.json's ``outcome`` holds the line the run
    fails with."""
    from dataprep.report import write_report

    final = ctx.run.final
    if final.exists():
        shutil.rmtree(final)
    final.mkdir(parents=True)
    documents = _gather_files(ctx, passes, stopped)
    stats = stats_document(ctx, passes)
    if documents is not None and sum(f["rows"] for f in documents) != stats["totals"]["kept"]:
        raise RuntimeError(
            f"documents/ holds {sum(f['rows'] for f in documents)} documents, but {stats['totals']['kept']} "
            "were kept (a bug: please report it)"
        )
    manifest = manifest_document(ctx, stats["totals"], documents)
    if "mix" in manifest:
        stats["mix"] = mix_stats(ctx, passes, manifest["mix"])
    write_text_atomic(final / "stats.json", json.dumps(stats, ensure_ascii=False, indent=1))
    write_text_atomic(final / "manifest.json", manifest_text(manifest))
    write_text_atomic(
        final / "recipe.yaml", yaml.safe_dump(ctx.recipe.resolved(), allow_unicode=True, sort_keys=False)
    )
    write_report(final, stats, manifest, drawn)
    names = sorted({e.name for e in final.iterdir()} | {"timings.json"})
    write_text_atomic(ctx.run.work / OUTPUTS_RECORD, json.dumps(names))  # before any of them moves
    for entry in sorted(final.iterdir()):
        target = ctx.run.out / entry.name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
        os.replace(entry, target)
    final.rmdir()
    return stats


def _gather_files(ctx: RunContext, passes: list[Pass], stopped: bool) -> list[dict[str, Any]] | None:
    """Into OUT/.final: what the global stages wrote (shards, tokenizer), rejected/ (one file per
    stage, parts in pass and task order) and documents/ when the recipe has no packing stage or
    asks for them (``output.documents``). Returns the manifest entries of documents/ (None when
    there is none)."""
    run, final, task_ids = ctx.run, ctx.run.final, ctx.task_ids
    if run.output.exists():
        link_tree(run.output, final)
    last = passes[-1]
    terminal = last.compute is not None and getattr(ctx.stages[last.compute], "terminal", False)
    documents = None
    if not stopped and (not terminal or ctx.recipe.output.documents):
        documents = _gather_documents(ctx, last, terminal)
    records: dict[tuple[int, str], dict[str, str]] = {}
    for p in passes:
        for t in task_ids:
            records[p.index, t] = json.loads(run.marker(p.index, t).read_text()).get("rejected_sha256", {})
        if run.decided(p.index).exists():
            records[p.index, DECIDE_TASK] = json.loads(run.decided(p.index).read_text()).get(
                "rejected_sha256", {}
            )
    for label in [READ_LABEL, *ctx.labels]:
        name = f"{label}.jsonl.zst"
        parts = [
            (run.rejected(p.index, t) / name, records.get((p.index, t), {}).get(name))
            for p in passes
            for t in [*task_ids, DECIDE_TASK]
        ]
        parts = [(x, digest) for x, digest in parts if x.exists()]
        if parts:
            concat_files([x for x, _ in parts], final / "rejected" / name, [d for _, d in parts])
    return documents


def _gather_documents(ctx: RunContext, last: Pass, terminal: bool) -> list[dict[str, Any]]:
    """OUT/.final/documents/tNNNNN.parquet, one per task: the documents of the last pass. After a
    terminal stage (packing), those its decide rejected (e.g. a dropped tail, a source's documents
    the mix did not choose) are left out, so the files hold exactly the documents in the shards,
    once each; they are matched by (source, id), the last ones in stream order first when an id
    repeats. Returns the manifest entries (path, rows, bytes, sha256)."""
    run = ctx.run
    unkept = _decide_rejected(ctx, last) if terminal else Counter()
    parts = []
    for t in ctx.task_ids:
        docs = run.docs(last.index, t, final=True)
        marker = json.loads(run.marker(last.index, t).read_text())
        if sha256_of(docs) != marker.get("docs_sha256"):
            raise refused(docs, "its sha256 differs from the one its completion marker records")
        parts.append((t, docs, marker))
    keep: dict[str, np.ndarray] = {}
    if unkept:
        for t, docs, _ in reversed(parts):  # the stream's end first: a dropped tail is its last documents
            keys = parquet_keys(docs)
            mask = np.ones(len(keys), dtype=bool)
            for i in range(len(keys) - 1, -1, -1):
                if unkept.get(keys[i], 0) > 0:
                    unkept[keys[i]] -= 1
                    mask[i] = False
            if not mask.all():
                keep[t] = mask
    out_dir = run.final / "documents"
    out_dir.mkdir(exist_ok=True)
    entries = []
    for t, docs, marker in parts:
        dst = out_dir / f"{t}.parquet"
        if t in keep:
            digest, rows = copy_parquet_kept(docs, dst, keep[t]), int(keep[t].sum())
        else:
            os.link(docs, dst)
            digest, rows = marker["docs_sha256"], int(marker["docs_written"])
        entries.append(
            {"path": f"documents/{dst.name}", "rows": rows, "bytes": dst.stat().st_size, "sha256": digest}
        )
    return entries


def _decide_rejected(ctx: RunContext, p: Pass) -> Counter[tuple[str, str]]:
    """(source, id) of the documents pass ``p``'s decide rejected, with their counts."""
    out: Counter[tuple[str, str]] = Counter()
    directory = ctx.run.rejected(p.index, DECIDE_TASK)
    for path in sorted(directory.glob("*.jsonl.zst")) if directory.exists() else []:
        for record in read_rejected(path):
            out[record["source"], record["id"]] += 1
    return out


def stats_document(ctx: RunContext, passes: list[Pass]) -> dict[str, Any]:
    """stats.json: input, stages, totals (accounting checked), lengths, and ``outcome`` when no
    document is left."""
    recipe, plan, labels = ctx.recipe, ctx.plan, ctx.labels
    all_stats, samples, kept_lengths = collect_stats(ctx, passes)
    read = all_stats[READ_LABEL]
    order = [READ_LABEL, *labels]
    totals = check_accounting(order, all_stats)
    totals["dropped_by_reason"] = {
        f"{label}/{reason}": n for label in order for reason, n in sorted(all_stats[label].drops.items())
    }
    stats: dict[str, Any] = {
        "recipe": {"name": recipe.name, "hash": recipe.hash()},
        "input": {
            "files": len(plan.files),
            "bytes": sum(f.size for f in plan.files),
            "tasks": len(ctx.task_ids),
            "file_notes": file_notes(ctx),
            "problems": {k: v for k, v in sorted(read.counters.items())},
            "problem_samples": dict(sorted(samples.items())),
        },
        "stages": stage_entries(recipe, all_stats),
        "totals": totals,
        "length_chars": length_entries(all_stats, kept_lengths),
    }
    if totals["kept"] == 0:
        hints = {f"{READ_LABEL}/{r}": read_hint(r, recipe.input) for r in read.drops}
        for label, st in zip(labels, ctx.stages, strict=True):
            hints |= {f"{label}/{r}": st.drop_hint(r, label) for r in all_stats[label].drops}
        message = nothing_left_message(stats, {k: v for k, v in hints.items() if v}, recipe.input)
        stats["outcome"] = {"status": "nothing_left", "message": message}
    return stats


def mix_stats(ctx: RunContext, passes: list[Pass], mix: dict[str, Any]) -> dict[str, Any]:
    """stats.json's ``mix``: the manifest's ``mix`` block, each source with ``docs_input`` and
    ``chars_input`` (documents and characters read from its files, before any stage) added."""
    from dataprep.inputs import source_of
    from dataprep.stats import StageStats

    names = list(mix["sources"])
    docs = [0] * len(names)
    chars = [0] * len(names)
    for t, task in zip(ctx.task_ids, ctx.plan.tasks, strict=True):
        k = source_of(task.rel, names)
        marker = json.loads(ctx.run.marker(passes[0].index, t).read_text())
        if k >= 0 and marker["read"] is not None:
            read = StageStats.from_json(marker["read"])
            docs[k] += read.docs_out
            chars[k] += read.chars_out
    out = json.loads(json.dumps(mix))
    for k, name in enumerate(names):
        out["sources"][name] = {"docs_input": docs[k], "chars_input": chars[k], **out["sources"][name]}
    return out


def manifest_document(
    ctx: RunContext, totals: dict[str, Any], documents: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """manifest.json (:class:`dataprep.formats.manifest.Manifest`): the run's identity (version,
    recipe, seed, inputs with their sha256), the document counts (with the files of documents/,
    when written), then what the global stages' decides returned, in recipe order."""
    recipe = ctx.recipe
    counts: dict[str, Any] = {"read": totals["docs_in"], "kept": totals["kept"], "dropped": totals["dropped"]}
    if documents is not None:
        counts["files"] = documents
    manifest = Manifest(
        dataprep_version=__version__,
        recipe={"name": recipe.name, "hash": recipe.hash(), "file": "recipe.yaml"},
        seed=recipe.seed,
        inputs=[{"path": f.rel, "bytes": f.size, "sha256": ctx.hashes[f.rel]} for f in ctx.files],
        documents=counts,
    )
    for part in ctx.manifest_parts:
        manifest.add(part)
    return manifest.to_json()


def draw_ahead(ctx: RunContext) -> Future[dict[str, str]] | None:
    """Start drawing the report's plots on a worker from the stats known now (every pass done),
    while the last decide runs in the driver; returns a future of :func:`report.render_plots`, or
    None when the executor has no worker to do it. Plots whose data the last decide changes are
    drawn again at the end (``render`` matches them by spec), so the page does not depend on
    this."""
    if not ctx.executor.has_workers:
        return None
    from dataprep.report import plot_specs, render_plots

    all_stats, _, kept_lengths = collect_stats(ctx, ctx.passes)
    stats = {
        "stages": stage_entries(ctx.recipe, all_stats),
        "length_chars": length_entries(all_stats, kept_lengths),
    }
    return ctx.executor.submit(render_plots, plot_specs(stats))


def link_tree(src: Path, dst: Path) -> None:
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


def concat_files(parts: list[Path], dst: Path, sha256: list[str | None] | None = None) -> None:
    """``parts`` one after the other into ``dst``; with ``sha256`` (one per part), each part must
    hash to its digest as it is copied, else :class:`WorkMismatch` names it."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(dst, "wb") as out:
        for k, part in enumerate(parts):
            h = hashlib.sha256()
            with open(part, "rb") as f:
                while block := f.read(1 << 20):
                    h.update(block)
                    out.write(block)
            if sha256 is not None and h.hexdigest() != sha256[k]:
                raise refused(part, "its sha256 differs from the one its completion marker records")
