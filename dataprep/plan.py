"""The plan of a run: its input files, its tasks (input splits in canonical order) and what
planning learnt about the files, with its JSON form (OUT/work/plan.json). Made by
:func:`dataprep.planning.make_plan`."""

from __future__ import annotations

import gc
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii  # the C implementation when available
from typing import Any

from dataprep.inputs import InputFile
from dataprep.stage.reader import InputSplit


@dataclass
class Plan:
    """The tasks of a run and what was learnt about its input files while planning.

    tasks: input splits in their canonical order (task i has id ``t{i:05d}``).
    file_notes: per file, why it produced no task (binary, empty, unsupported, unreadable); a
    small file left to its reader (:attr:`InputSplit.sniff`) is noted by its pass-0 task.
    sha256: per file (relative path) that planning read whole because no task reads its bytes as
    they are on disk (files with no task, Parquet files, compressed files decompressed into
    chunks), its SHA-256 hex digest (None when unreadable), when asked; a resumed run checks
    these files whole.
    read_sha256: per file whose every byte planning read anyway (to cut it at line starts, or a
    file its sniff held whole), the whole file's SHA-256; its splits carry the sha256 of
    their ranges (:attr:`InputSplit.sha256`), which the reader checks as it reads them.
    """

    files: list[InputFile]
    tasks: list[InputSplit]
    file_notes: list[dict[str, str]] = field(default_factory=list)
    sha256: dict[str, str | None] = field(default_factory=dict)
    read_sha256: dict[str, str] = field(default_factory=dict)

    @property
    def task_ids(self) -> list[str]:
        return [f"t{i:05d}" for i in range(len(self.tasks))]

    def to_json(self) -> dict[str, Any]:
        return {
            "files": [_file_json(f) for f in self.files],
            "tasks": [_split_json(t) for t in self.tasks],
            "file_notes": self.file_notes,
            "sha256": self.sha256,
            "read_sha256": self.read_sha256,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Plan:
        return cls(
            [InputFile(**f) for f in d["files"]],
            cls.tasks_from_json(d),
            d["file_notes"],
            d.get("sha256", {}),
            d.get("read_sha256", {}),
        )

    @staticmethod
    def tasks_from_json(d: dict[str, Any]) -> list[InputSplit]:
        """The tasks of a plan's JSON alone: all a worker needs of the plan (no object is built
        per input file)."""
        return [InputSplit(**t) for t in d["tasks"]]

    def fingerprint(self) -> str:
        """The sha256 of ``json.dumps([file as a dict, ...], sort_keys=True)``: each file's
        entry formatted directly, the same text about five times faster (200,000 files)."""
        key = "[" + ", ".join(map(_file_key, self.files)) + "]"
        return hashlib.sha256(key.encode()).hexdigest()


def _file_json(f: InputFile) -> dict[str, Any]:
    """``dataclasses.asdict(f)``, without its generic (and slow) recursion."""
    return {"path": f.path, "rel": f.rel, "size": f.size, "mtime_ns": f.mtime_ns}


def _file_key(f: InputFile) -> str:
    """``json.dumps(_file_json(f), sort_keys=True)``, formatted directly."""
    return (
        f'{{"mtime_ns": {f.mtime_ns}, "path": {encode_basestring_ascii(f.path)}, '
        f'"rel": {encode_basestring_ascii(f.rel)}, "size": {f.size}}}'
    )


def _split_json(t: InputSplit) -> dict[str, Any]:
    """``dataclasses.asdict(t)``, without its generic recursion (a group holds thousands of parts)."""
    return {
        "path": t.path,
        "rel": t.rel,
        "reader": t.reader,
        "start": t.start,
        "end": t.end,
        "first_line": t.first_line,
        "nbytes": t.nbytes,
        "sha256": t.sha256,
        "sniff": t.sniff,
        "more": t.more,
    }


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a plan is listed, made or loaded; then one collection
    of what the block made (any cycle it left is freed) and the survivors frozen out of later
    collections (``gc.freeze``). A plan of many files is hundreds of thousands of objects that
    live as long as the run and hold no cycles; each collection would traverse them all
    (200,000 files: 2 of the 9 s of planning)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.collect(0)  # with collection off, everything the block made is still in generation 0
        gc.freeze()
        if enabled:
            gc.enable()
