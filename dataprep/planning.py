"""From input files to a plan: each file sniffed and cut into byte-sized splits, in file order.

A file is sniffed (its first 8 KiB: empty, binary, not in the declared encoding, or no reader
for its type: noted, no task), then cut into splits of about ``input.split_bytes``; a small
uncompressed UTF-8 text file (up to 1 MiB) is not opened here but left whole to its reader, which
checks its first bytes as it reads it (:attr:`InputSplit.sniff`). A small corpus is cut finer
and its compressed files decompressed into chunks so that every worker gets work; small splits
are grouped into tasks. The plan depends only on the input, never on the worker count.
"""

from __future__ import annotations

import codecs
import dataclasses
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dataprep.inputs import InputFile
from dataprep.io import (
    SNIFF_BYTES,
    bom_encoding,
    compression_of,
    decompress_chunks,
    file_sha256,
    is_utf8,
    logical_suffix,
    sniff,
)
from dataprep.plan import Plan
from dataprep.readers import SMALL_SPLIT_BYTES, LineReader
from dataprep.recipe import InputParams, Recipe
from dataprep.stage import registry
from dataprep.stage.reader import InputSplit, Reader, ReadReport
from dataprep.textcheck import text_note

MIN_SPLIT_BYTES = 1 << 20


def reader_for(path: str, params: InputParams) -> type[Reader] | None:
    """The reader of ``path``: the one ``input.format`` names, else the one registered for the
    file's logical suffix (compression suffixes aside); None when no reader takes it."""
    readers = registry.readers()
    if params.format != "auto":
        return next(r for r in readers if r.name == params.format)
    suffix = logical_suffix(path)
    return next((r for r in readers if suffix in r.extensions), None)


SCAN_JOB_FILES = 1000  # files per planning job at most
SCAN_JOB_BYTES = 64 << 20  # bytes a planning job reads at most, but for one large file alone

ScanJob = tuple[InputFile, str | None, Any, bool]  # (file, reader name, reader parameters, hash it)


def _scan_jobs(jobs: list[ScanJob], split_bytes: int) -> list[list[ScanJob]]:
    """Consecutive files in jobs of up to SCAN_JOB_FILES files and about SCAN_JOB_BYTES of reading
    (a file is sniffed, ~8 KiB, unless it is larger than ``split_bytes`` and read whole to be
    cut): the planning of a corpus of small files costs a few jobs, not one per file."""
    out: list[list[ScanJob]] = []
    batch: list[ScanJob] = []
    load = 0
    for job in jobs:
        cost = job[0].size if job[0].size > split_bytes else min(job[0].size, SNIFF_BYTES)
        if batch and (len(batch) >= SCAN_JOB_FILES or load + cost > SCAN_JOB_BYTES):
            out.append(batch)
            batch, load = [], 0
        batch.append(job)
        load += cost
    if batch:
        out.append(batch)
    return out


def _scan_files(jobs: list[ScanJob]) -> list[dict[str, Any]]:
    """:func:`_scan_file` of each file of a planning job (module level: runs on a worker)."""
    return [_scan_file(job) for job in jobs]


def _scan_file(job: ScanJob) -> dict[str, Any]:
    """Plan one file: its splits at the reader parameters' split_bytes, or the note (kind,
    message) on why it has none; ``sha256``: when asked and no task will read the file's bytes as
    they are on disk (no task, or a Parquet file), its sha256 (None when it cannot be read),
    else ""; ``read_sha256``: the whole file's sha256 when planning read all of it anyway.
    Reads a file's first 8 KiB, and all of it only when it is cut into ranges or hashed here."""
    f, reader_name, reader_params, want_hash = job
    out: dict[str, Any] = {"splits": [], "note": None, "sha256": "", "read_sha256": None}

    def hash_whole(head: bytes | None = None) -> dict[str, Any]:
        if want_hash:
            if head is not None and len(head) == f.size and compression_of(f.path) is None:
                out["sha256"] = hashlib.sha256(head).hexdigest()
            else:
                try:
                    out["sha256"] = file_sha256(f.path)
                except OSError:
                    out["sha256"] = None
        return out

    if reader_name is None:
        return hash_whole()
    reader = registry.get(reader_name)
    if f.size == 0:
        out["note"] = ("empty_file", "empty file (0 bytes)")
        return hash_whole(b"")
    head = None
    plain = compression_of(f.path) is None
    if issubclass(reader, LineReader):
        try:
            if plain:
                with open(f.path, "rb", buffering=0) as raw:
                    head = raw.read(SNIFF_BYTES)
            else:
                head = sniff(f.path)
        except (OSError, EOFError) as e:
            out["note"] = ("read_error", f"cannot read: {e}")
            return hash_whole()
        if not head:
            out["note"] = ("empty_file", "empty file (no data after decompression)")
            return hash_whole()
        note = text_note(head, getattr(reader_params, "encoding", "utf-8"))
        if note is not None:
            out["note"] = note
            return hash_whole(head)
    try:
        if issubclass(reader, LineReader):
            out["splits"], out["read_sha256"] = reader.plan_hashed(
                f.path, f.rel, reader_params, head if plain else None, f.size
            )
        else:
            out["splits"] = reader.plan(f.path, f.rel, reader_params)  # a corrupt Parquet footer fails here
            hash_whole()
    except Exception as e:
        out["splits"], out["read_sha256"] = [], None
        out["note"] = ("read_error", f"cannot plan: {type(e).__name__}: {e}")
        hash_whole()
    return out


def _split_file(job: tuple[InputFile, str, Any]) -> tuple[list[InputSplit], str | None]:
    """One readable file's splits at its reader parameters' split_bytes, and the whole file's
    sha256 when that read all of it (runs on a worker)."""
    f, reader_name, reader_params = job
    reader = registry.get(reader_name)
    if issubclass(reader, LineReader):
        return reader.plan_hashed(f.path, f.rel, reader_params, size=f.size)
    return reader.plan(f.path, f.rel, reader_params), None


def make_plan(
    files: list[InputFile],
    recipe: Recipe,
    report: ReadReport,
    scratch: Path | None = None,
    parallel_map: Callable[[Callable[[Any], Any], list[Any]], list[Any]] | None = None,
    hash_files: bool = False,
    skipped: list[dict[str, str]] | None = None,
) -> Plan:
    """Sniff each file and cut it into splits. Files without a task are noted (and reported).
    A small file that its reader checks as it reads it (:func:`_sniffs_small_files`) is not
    opened: its one split is marked ``sniff``, and its note, if any, comes from pass 0.

    Files are planned in jobs of consecutive files (:func:`_scan_jobs`: up to a thousand small
    files, or one large file), through ``parallel_map`` when given (e.g. the executor's workers:
    planning reads every uncompressed file larger than the split size to find line starts, which
    on hundreds of GB takes minutes on one core). With ``hash_files`` the files whose bytes no
    task reads as they are on disk are hashed by the same job (``Plan.sha256``); the others are
    hashed by the tasks that read them (pass 0, :class:`dataprep.readers.LineReader`). Notes and
    counts are applied in file order, so the plan and report do not depend on the workers or on
    how files are batched into jobs. A finer cut and the compressed files to cut into chunks
    (below) go one job per file through ``parallel_map`` as well.

    ``skipped``: the notes of :func:`dataprep.inputs.expand_inputs` on entries that are not
    regular files, noted and reported first (under ``on_error: stop`` the first one stops the run).

    When the plan has fewer than ``input.min_tasks`` tasks, splits are cut finer (down to 1 MiB) so
    that every worker gets work; a compressed file cannot be cut, so, given ``scratch``, each
    compressed line file worth more than a quarter split is decompressed into line-aligned chunks
    there (deleted after the first pass). The plan depends only on the input, never on the worker
    count, so outputs stay identical for any number of workers.
    """
    params = recipe.input_params
    # per logical suffix: (reader name, its parameters, whether it checks the small files it reads)
    by_kind: dict[str, tuple[str | None, Any, bool]] = {}
    # per file: (file, reader name, its parameters, the split of a small file left to its reader)
    entries: list[tuple[InputFile, str | None, Any, InputSplit | None]] = []
    smallest = min(SMALL_SPLIT_BYTES, params.split_bytes)  # a file left to its reader is no larger
    jobs: list[ScanJob] = []
    for f in files:
        kind = logical_suffix(f.path) if params.format == "auto" else params.format
        if kind not in by_kind:
            reader = reader_for(f.path, params)
            rp = None
            if reader is not None:
                rp = dataclasses.replace(recipe.readers[reader.name], split_bytes=params.split_bytes)
            by_kind[kind] = (None if reader is None else reader.name, rp, _sniffs_small_files(reader, rp))
        reader_name, rp, leaves_small = by_kind[kind]
        split = None
        if leaves_small and reader_name and 0 < f.size <= smallest and compression_of(f.path) is None:
            split = InputSplit(f.path, f.rel, reader_name, 0, f.size, 1, f.size, "", True)
        else:
            jobs.append((f, reader_name, rp, hash_files))
        entries.append((f, reader_name, rp, split))
    notes: list[dict[str, str]] = []
    for note in skipped or []:  # entries of the inputs that are not regular files
        notes.append(note)
        report.file_error(note["kind"], note["file"], note["message"])
    batches = _scan_jobs(jobs, params.split_bytes)
    scans = iter([scan for batch in (parallel_map or _map)(_scan_files, batches) for scan in batch])
    readable: list[tuple[InputFile, str | None, Any, InputSplit | None]] = []  # as entries
    tasks: list[InputSplit] = []
    sha256: dict[str, str | None] = {}
    read_sha256: dict[str, str] = {}
    for f, reader_name, rp, split in entries:
        if split is not None:  # its reader counts it read, or notes it
            readable.append((f, reader_name, rp, split))
            tasks.append(split)
            continue
        scan = next(scans)
        if scan["sha256"] != "":
            sha256[f.rel] = scan["sha256"]
        if reader_name is None:
            notes.append(
                {"file": f.rel, "kind": "unsupported", "message": "no reader for this file type (skipped)"}
            )
            report.stats.count("files.unsupported")
        elif scan["note"] is not None:
            kind, message = scan["note"]
            notes.append({"file": f.rel, "kind": kind, "message": message})
            report.file_error(kind, f.rel, message)
        else:
            report.stats.count("files.read")
            readable.append((f, reader_name, rp, None))
            tasks += scan["splits"]
            if scan["read_sha256"]:
                read_sha256[f.rel] = scan["read_sha256"]
    if len(tasks) < params.min_tasks:
        # a small corpus (or a few big files): cut finer so that every worker gets work
        finer = min(
            params.split_bytes, max(sum(t.nbytes for t in tasks) // params.min_tasks, MIN_SPLIT_BYTES)
        )
        if finer < params.split_bytes:  # finer >= 1 MiB: a file left to its reader stays whole
            cuts = [
                (f, name, dataclasses.replace(rp, split_bytes=finer))
                for f, name, rp, s in readable
                if s is None
            ]
            recut = iter(zip(cuts, (parallel_map or _map)(_split_file, cuts), strict=True))
            tasks = []
            for *_, split in readable:
                if split is not None:
                    tasks.append(split)
                    continue
                (f, _, _), (splits, digest) = next(recut)
                tasks += splits
                if digest:
                    read_sha256[f.rel] = digest
        if scratch is not None:
            tasks = _chunk_compressed(tasks, recipe, finer, scratch, report, parallel_map or _map, sha256)
    if params.group_files:
        total = sum(t.nbytes for t in tasks)
        target = min(params.split_bytes, max(total // max(params.min_tasks, 1), MIN_SPLIT_BYTES))
        tasks = group_splits(tasks, target, by_source=bool(recipe.sources))
    if not hash_files:
        sha256, read_sha256 = {}, {}
    return Plan(files, tasks, notes, sha256, read_sha256)


def _sniffs_small_files(reader: type[Reader] | None, params: Any) -> bool:
    """True when ``reader`` checks the small files it reads whole (:attr:`InputSplit.sniff`):
    a line reader of UTF-8 text whose records never straddle lines, which reads an uncompressed
    file of up to SMALL_SPLIT_BYTES in one call. Planning then only lists such files, so each
    is opened once, by the task that reads it."""
    return (
        reader is not None
        and issubclass(reader, LineReader)
        and not reader.whole_file(params)
        and is_utf8(params.encoding)
    )


def group_splits(tasks: list[InputSplit], target: int, by_source: bool = False) -> list[InputSplit]:
    """Consecutive splits (in canonical order) merged into tasks of at most ``target`` on-disk
    bytes (a split as large alone stays alone); with ``by_source`` a task never spans two sources
    (the first component of ``rel``). One pass, linear in the splits. The documents read, in
    order, are the same as those of the splits one by one."""
    out: list[InputSplit] = []
    group: list[InputSplit] = []
    size = 0

    def flush() -> None:
        if len(group) == 1:
            out.append(group[0])
        elif group:
            head = group[0]
            more = [
                [
                    s.path,
                    s.rel,
                    s.reader,
                    s.start,
                    s.end,
                    s.first_line,
                    s.nbytes,
                    *([s.sha256, True] if s.sniff else [s.sha256] if s.sha256 else []),
                ]
                for s in group[1:]
            ]
            out.append(dataclasses.replace(head, nbytes=size, more=more))

    for t in tasks:
        same = not by_source or not group or group[0].rel.split("/", 1)[0] == t.rel.split("/", 1)[0]
        if group and (size + t.nbytes > target or not same):
            flush()
            group, size = [], 0
        group.append(t)
        size += t.nbytes
    flush()
    return out


def _map(fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    return [fn(x) for x in items]


def _max_line_bytes(recipe: Recipe, task: InputSplit) -> int | None:
    """The reader's line limit for a task, when its parameters have one."""
    params = recipe.readers[task.reader]
    limit = getattr(params, "max_line_bytes", None)
    return limit if isinstance(limit, int) else None


def _decompress_job(
    job: tuple[str, Path, int, int | None],
) -> tuple[list[tuple[Path, int, int]], tuple[int, str] | None, str]:
    """:func:`decompress_chunks` of one file (module level: runs on a worker)."""
    return decompress_chunks(*job)


def _chunk_compressed(
    tasks: list[InputSplit],
    recipe: Recipe,
    chunk_bytes: int,
    scratch: Path,
    report: ReadReport,
    parallel_map: Callable[[Callable[[Any], Any], list[Any]], list[Any]],
    sha256: dict[str, str | None],
) -> list[InputSplit]:
    """Each compressed line file worth more than a quarter chunk decompressed into line-aligned
    chunks under ``scratch``, one file per job of ``parallel_map``; read errors are reported in
    task order; the sha256 of each file so decompressed (hashed by that read) goes into
    ``sha256`` (its tasks read the chunks, not the file)."""

    def chunked(t: InputSplit) -> bool:
        reader = registry.get(t.reader)
        return (
            compression_of(t.path) is not None
            and _plain_lines(t.path, recipe.readers[t.reader])
            and t.nbytes > chunk_bytes // 4
            and reader.chunkable(recipe.readers[t.reader])
        )

    todo = [k for k, t in enumerate(tasks) if chunked(t)]
    jobs = [
        (tasks[k].path, scratch / f"{k:05d}", chunk_bytes, _max_line_bytes(recipe, tasks[k])) for k in todo
    ]
    done = dict(zip(todo, parallel_map(_decompress_job, jobs), strict=True))
    out: list[InputSplit] = []
    for k, t in enumerate(tasks):
        if k not in done:
            out.append(t)
            continue
        chunks, error, sha256[t.rel] = done[k]
        if error is not None:  # at the line the reader would name reading the file itself
            report.file_error("read_error", f"{t.rel}:{error[0]}", error[1])
        total = sum(n for _, _, n in chunks) or 1
        out += [
            InputSplit(str(p), t.rel, t.reader, 0, -1, first, t.nbytes * n // total) for p, first, n in chunks
        ]
    return out


def _plain_lines(path: str, params: Any) -> bool:
    """True when the file's bytes can be cut at any newline byte: UTF-8 (or a codec whose
    multi-byte characters never hold 0x0A, as GB18030 and Big5), not UTF-16/32."""
    bom = bom_encoding(sniff(path, 4))
    codec = codecs.lookup(bom[0] if bom else getattr(params, "encoding", "utf-8")).name
    return not codec.startswith(("utf-16", "utf-32"))
