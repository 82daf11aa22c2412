"""From command-line inputs to an ordered list of tasks.

Inputs are files, directories (walked recursively, hidden entries skipped) and globs. Files are
ordered by their path relative to the input root, so task order, document ids and therefore
outputs do not depend on the file system's listing order or on the worker count.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dataprep import stage as registry
from dataprep.io import compression_of, decompress_chunks, logical_suffix, looks_binary, sniff
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


@dataclass
class Plan:
    """The tasks of a run and what was learnt about its input files while planning.

    tasks: input splits in their canonical order (task i has id ``t{i:05d}``).
    file_notes: per file, why it produced no task (binary, empty, unsupported, unreadable).
    """

    files: list[InputFile]
    tasks: list[InputSplit]
    file_notes: list[dict[str, str]] = field(default_factory=list)

    @property
    def task_ids(self) -> list[str]:
        return [f"t{i:05d}" for i in range(len(self.tasks))]

    def to_json(self) -> dict[str, Any]:
        return {
            "files": [asdict(f) for f in self.files],
            "tasks": [asdict(t) for t in self.tasks],
            "file_notes": self.file_notes,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Plan:
        return cls(
            [InputFile(**f) for f in d["files"]], [InputSplit(**t) for t in d["tasks"]], d["file_notes"]
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


def make_plan(
    files: list[InputFile], recipe: Recipe, report: ReadReport, scratch: Path | None = None
) -> Plan:
    """Sniff each file and cut it into splits. Files without a task are noted (and reported).

    When the plan has fewer than ``input.min_tasks`` tasks, splits are cut finer (down to 1 MiB) so
    that every worker gets work; a compressed file cannot be cut, so, given ``scratch``, each
    compressed line file worth more than a quarter split is decompressed into line-aligned chunks
    there (deleted after the first pass). The plan depends only on the input, never on the worker
    count, so outputs stay identical for any number of workers.
    """
    params = registry.build_params(
        InputParams, {k: v for k, v in recipe.input.items() if k in InputParams.__dataclass_fields__}, "input"
    )
    readable: list[tuple[InputFile, type[registry.Reader], Any]] = []
    notes: list[dict[str, str]] = []

    def note(f: InputFile, kind: str, message: str) -> None:
        notes.append({"file": f.rel, "kind": kind, "message": message})
        report.file_error(kind, f.rel, message)

    for f in files:
        reader = reader_for(f.path, params)
        if reader is None:
            notes.append(
                {"file": f.rel, "kind": "unsupported", "message": "no reader for this file type (skipped)"}
            )
            report.stats.count("files.unsupported")
            continue
        if f.size == 0:
            note(f, "empty_file", "empty file (0 bytes)")
            continue
        if reader.name != "parquet":
            try:
                head = sniff(f.path)
            except (OSError, EOFError) as e:
                note(f, "read_error", f"cannot read: {e}")
                continue
            if not head:
                note(f, "empty_file", "empty file (no data after decompression)")
                continue
            if looks_binary(head):
                note(f, "binary_file", "looks binary (control bytes or undecodable text), skipped")
                continue
        reader_params = recipe.reader_params(reader)
        try:
            reader.plan(f.path, f.rel, reader_params)  # a corrupt Parquet footer fails here
        except Exception as e:
            note(f, "read_error", f"cannot plan: {type(e).__name__}: {e}")
            continue
        report.stats.count("files.read")
        readable.append((f, reader, reader_params))

    def cut(split_bytes: int) -> list[InputSplit]:
        return [
            split
            for f, reader, rp in readable
            for split in reader.plan(f.path, f.rel, dataclasses.replace(rp, split_bytes=split_bytes))
        ]

    tasks = cut(params.split_bytes)
    if len(tasks) < params.min_tasks:
        # a small corpus (or a few big files): cut finer so that every worker gets work
        finer = min(
            params.split_bytes, max(sum(t.nbytes for t in tasks) // params.min_tasks, MIN_SPLIT_BYTES)
        )
        if finer < params.split_bytes:
            tasks = cut(finer)
        if scratch is not None:
            tasks = _chunk_compressed(tasks, recipe, finer, scratch, report)
    return Plan(files, tasks, notes)


def _chunk_compressed(
    tasks: list[InputSplit], recipe: Recipe, chunk_bytes: int, scratch: Path, report: ReadReport
) -> list[InputSplit]:
    out: list[InputSplit] = []
    for k, t in enumerate(tasks):
        reader = registry.get(t.reader)
        if (
            compression_of(t.path) is None
            or t.nbytes <= chunk_bytes // 4
            or not reader.chunkable(recipe.reader_params(reader))
        ):
            out.append(t)
            continue
        chunks, error = decompress_chunks(t.path, scratch / f"{k:05d}", chunk_bytes)
        if error:
            report.file_error("read_error", f"{t.rel}:{chunks[-1][1] if chunks else 1}", error)
        total = sum(n for _, _, n in chunks) or 1
        out += [
            InputSplit(str(p), t.rel, t.reader, 0, -1, first, t.nbytes * n // total) for p, first, n in chunks
        ]
    return out
