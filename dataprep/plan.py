"""From command-line inputs to an ordered list of tasks.

Inputs are files, directories (walked recursively, hidden entries skipped) and globs. Files are
ordered by their path relative to the input root, so task order, document ids and therefore
outputs do not depend on the file system's listing order or on the worker count.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dataprep import stage as registry
from dataprep.io import compression_of, decompress_chunks, file_sha256, logical_suffix, looks_binary, sniff
from dataprep.recipe import InputParams, Recipe
from dataprep.stage import InputSplit, ReadReport

MIN_SPLIT_BYTES = 1 << 20


class InputNotFound(FileNotFoundError):
    """A command-line input matched nothing."""


@dataclass(frozen=True)
class InputFile:
    path: str  # absolute
    rel: str  # relative to its input root; appears in document ids
    size: int
    mtime_ns: int


def _has_magic(s: str) -> bool:
    return any(c in s for c in "*?[")


def expand_inputs(args: list[str], exclude: Path | None = None) -> list[InputFile]:
    """Files named by ``args``, de-duplicated and sorted by ``rel``.

    rel is relative to the directory given (or the glob's fixed prefix, or the file's parent);
    with several arguments each rel is prefixed by the argument's own name to keep ids unique.
    Files under ``exclude`` (the output directory, when it sits inside an input) are skipped.
    """
    found: dict[str, InputFile] = {}
    excluded = exclude.resolve() if exclude is not None else None
    for arg in args:
        if _has_magic(arg):
            prefix = Path(arg.split("*")[0].split("?")[0].split("[")[0])
            root = prefix if arg.endswith(os.sep) or prefix.is_dir() else prefix.parent
            paths = [Path(p) for p in glob.glob(arg, recursive=True) if Path(p).is_file()]
            if not paths:
                raise InputNotFound(f"input {arg!r} matches no file")
        else:
            p = Path(arg)
            if p.is_file():
                root, paths = p.parent, [p]
            elif p.is_dir():
                root = p
                paths = []
                for dirpath, dirnames, filenames in os.walk(p):
                    dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                    paths += [Path(dirpath) / f for f in filenames if not f.startswith(".")]
            else:
                raise InputNotFound(f"input {arg!r} does not exist")
        for path in paths:
            if excluded is not None and path.resolve().is_relative_to(excluded):
                continue
            rel = path.relative_to(root).as_posix()
            if len(args) > 1:
                rel = f"{Path(arg.rstrip('/')).name or arg}/{rel}"
            st = path.stat()
            absolute = str(path.resolve())
            found.setdefault(absolute, InputFile(absolute, rel, st.st_size, st.st_mtime_ns))
    return sorted(found.values(), key=lambda f: (f.rel, f.path))


def source_files(recipe: Recipe, exclude: Path | None = None) -> list[InputFile]:
    """The files of a recipe's ``sources:``, source by source in priority order (highest first),
    each source's files sorted as :func:`expand_inputs` sorts them, their ``rel`` prefixed by the
    source name (``name/rel``: every document id and source names its source). A file named by
    two sources is an error."""
    out: list[InputFile] = []
    owner: dict[str, str] = {}
    for src in recipe.sources_by_priority():
        for f in expand_inputs(src.inputs, exclude=exclude):
            if f.path in owner:
                raise InputNotFound(
                    f"{f.path} belongs to two sources ({owner[f.path]} and {src.name}); "
                    "give each file to one source"
                )
            owner[f.path] = src.name
            out.append(dataclasses.replace(f, rel=f"{src.name}/{f.rel}"))
    return out


def source_of(rel: str, names: list[str]) -> int:
    """Index in ``names`` of the source a file (its ``rel``, as :func:`source_files` made it)
    belongs to; -1 for none."""
    head = rel.split("/", 1)[0]
    return names.index(head) if head in names else -1


@dataclass
class Plan:
    """The tasks of a run and what was learnt about its input files while planning.

    tasks: input splits in their canonical order (task i has id ``t{i:05d}``).
    file_notes: per file, why it produced no task (binary, empty, unsupported, unreadable).
    sha256: per file (relative path), its SHA-256 hex digest (None when unreadable), when asked.
    """

    files: list[InputFile]
    tasks: list[InputSplit]
    file_notes: list[dict[str, str]] = field(default_factory=list)
    sha256: dict[str, str | None] = field(default_factory=dict)

    @property
    def task_ids(self) -> list[str]:
        return [f"t{i:05d}" for i in range(len(self.tasks))]

    def to_json(self) -> dict[str, Any]:
        return {
            "files": [asdict(f) for f in self.files],
            "tasks": [asdict(t) for t in self.tasks],
            "file_notes": self.file_notes,
            "sha256": self.sha256,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Plan:
        return cls(
            [InputFile(**f) for f in d["files"]],
            [InputSplit(**t) for t in d["tasks"]],
            d["file_notes"],
            d.get("sha256", {}),
        )

    def fingerprint(self) -> str:
        key = json.dumps([asdict(f) for f in self.files], sort_keys=True)
        return hashlib.sha256(key.encode()).hexdigest()


def reader_for(path: str, params: InputParams) -> type[registry.Reader] | None:
    readers = registry.readers()
    if params.format != "auto":
        return next(r for r in readers if r.name == params.format)
    suffix = logical_suffix(path)
    return next((r for r in readers if suffix in r.extensions), None)


def _scan_file(job: tuple[InputFile, str | None, Any, bool]) -> dict[str, Any]:
    """Plan one file (module level: runs on a worker): its splits at the reader parameters'
    split_bytes, or the note (kind, message) on why it has none; and its sha256 when asked (None
    when it cannot be read). Reads the file at most twice back to back (splitting, hashing)."""
    f, reader_name, reader_params, want_hash = job
    out: dict[str, Any] = {"splits": [], "note": None, "sha256": None}
    if want_hash:
        with contextlib.suppress(OSError):
            out["sha256"] = file_sha256(f.path)
    if reader_name is None:
        return out
    reader = registry.get(reader_name)
    if f.size == 0:
        out["note"] = ("empty_file", "empty file (0 bytes)")
        return out
    if reader.name != "parquet":
        try:
            head = sniff(f.path)
        except (OSError, EOFError) as e:
            out["note"] = ("read_error", f"cannot read: {e}")
            return out
        if not head:
            out["note"] = ("empty_file", "empty file (no data after decompression)")
            return out
        if looks_binary(head):
            out["note"] = ("binary_file", "looks binary (control bytes or undecodable text), skipped")
            return out
    try:
        out["splits"] = reader.plan(f.path, f.rel, reader_params)  # a corrupt Parquet footer fails here
    except Exception as e:
        out["note"] = ("read_error", f"cannot plan: {type(e).__name__}: {e}")
    return out


def _split_file(job: tuple[InputFile, str, Any]) -> list[InputSplit]:
    """One readable file's splits at its reader parameters' split_bytes (runs on a worker)."""
    f, reader_name, reader_params = job
    return registry.get(reader_name).plan(f.path, f.rel, reader_params)


def make_plan(
    files: list[InputFile],
    recipe: Recipe,
    report: ReadReport,
    scratch: Path | None = None,
    parallel_map: Callable[[Callable[[Any], Any], list[Any]], list[Any]] | None = None,
    hash_files: bool = False,
) -> Plan:
    """Sniff each file and cut it into splits. Files without a task are noted (and reported).

    Files are planned independently, through ``parallel_map`` when given (e.g. the executor's
    workers: planning reads every uncompressed file to find line starts, which on hundreds of GB
    takes minutes on one core); with ``hash_files`` the same job records each file's sha256 in
    ``Plan.sha256``. Notes and counts are applied in file order, so the plan and report do not
    depend on the workers. A finer cut and the compressed files to cut into chunks (below) go
    one job per file through ``parallel_map`` as well.

    When the plan has fewer than ``input.min_tasks`` tasks, splits are cut finer (down to 1 MiB) so
    that every worker gets work; a compressed file cannot be cut, so, given ``scratch``, each
    compressed line file worth more than a quarter split is decompressed into line-aligned chunks
    there (deleted after the first pass). The plan depends only on the input, never on the worker
    count, so outputs stay identical for any number of workers.
    """
    params = registry.build_params(
        InputParams, {k: v for k, v in recipe.input.items() if k in InputParams.__dataclass_fields__}, "input"
    )
    jobs = []
    for f in files:
        reader = reader_for(f.path, params)
        rp = None
        if reader is not None:
            rp = dataclasses.replace(recipe.reader_params(reader), split_bytes=params.split_bytes)
        jobs.append((f, None if reader is None else reader.name, rp, hash_files))
    scans = (parallel_map or _map)(_scan_file, jobs)
    readable: list[tuple[InputFile, str, Any]] = []  # (file, reader name, reader parameters)
    notes: list[dict[str, str]] = []
    tasks: list[InputSplit] = []
    for (f, reader_name, rp, _), scan in zip(jobs, scans, strict=True):
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
            readable.append((f, reader_name, rp))
            tasks += scan["splits"]
    sha256 = {f.rel: scan["sha256"] for f, scan in zip(files, scans, strict=True)} if hash_files else {}
    if len(tasks) < params.min_tasks:
        # a small corpus (or a few big files): cut finer so that every worker gets work
        finer = min(
            params.split_bytes, max(sum(t.nbytes for t in tasks) // params.min_tasks, MIN_SPLIT_BYTES)
        )
        if finer < params.split_bytes:
            jobs = [(f, name, dataclasses.replace(rp, split_bytes=finer)) for f, name, rp in readable]
            tasks = [split for splits in (parallel_map or _map)(_split_file, jobs) for split in splits]
        if scratch is not None:
            tasks = _chunk_compressed(tasks, recipe, finer, scratch, report, parallel_map or _map)
    return Plan(files, tasks, notes, sha256)


def _map(fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    return [fn(x) for x in items]


def _max_line_bytes(recipe: Recipe, task: InputSplit) -> int | None:
    """The reader's line limit for a task, when its parameters have one."""
    params = recipe.reader_params(registry.get(task.reader))
    limit = getattr(params, "max_line_bytes", None)
    return limit if isinstance(limit, int) else None


def _decompress_job(job: tuple[str, Path, int, int | None]) -> tuple[list[tuple[Path, int, int]], str]:
    """:func:`decompress_chunks` of one file (module level: runs on a worker)."""
    return decompress_chunks(*job)


def _chunk_compressed(
    tasks: list[InputSplit],
    recipe: Recipe,
    chunk_bytes: int,
    scratch: Path,
    report: ReadReport,
    parallel_map: Callable[[Callable[[Any], Any], list[Any]], list[Any]],
) -> list[InputSplit]:
    """Each compressed line file worth more than a quarter chunk decompressed into line-aligned
    chunks under ``scratch``, one file per job of ``parallel_map``; read errors are reported in
    task order."""

    def chunked(t: InputSplit) -> bool:
        reader = registry.get(t.reader)
        return (
            compression_of(t.path) is not None
            and t.nbytes > chunk_bytes // 4
            and reader.chunkable(recipe.reader_params(reader))
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
        chunks, error = done[k]
        if error:
            report.file_error("read_error", f"{t.rel}:{chunks[-1][1] if chunks else 1}", error)
        total = sum(n for _, _, n in chunks) or 1
        out += [
            InputSplit(str(p), t.rel, t.reader, 0, -1, first, t.nbytes * n // total) for p, first, n in chunks
        ]
    return out
