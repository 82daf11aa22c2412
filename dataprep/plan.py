"""The plan of a run: its input files, its tasks (input splits in canonical order) and what
planning learnt about the files, with its JSON form (OUT/work/plan.json). Made by
:func:`dataprep.planning.make_plan`."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from dataprep.inputs import InputFile
from dataprep.stage.reader import InputSplit


@dataclass
class Plan:
    """The tasks of a run and what was learnt about its input files while planning.

    tasks: input splits in their canonical order (task i has id ``t{i:05d}``).
    file_notes: per file, why it produced no task (binary, empty, unsupported, unreadable).
    sha256: per file (relative path) that planning read whole because no task reads its bytes as
    they are on disk (files with no task, Parquet files, compressed files decompressed into
    chunks), its SHA-256 hex digest (None when unreadable), when asked; a resumed run checks
    these files whole.
    read_sha256: per file whose every byte planning read anyway (to cut it at line starts, or a
    small file its sniff held whole), the whole file's SHA-256; its splits carry the sha256 of
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
            [InputSplit(**t) for t in d["tasks"]],
            d["file_notes"],
            d.get("sha256", {}),
            d.get("read_sha256", {}),
        )

    def fingerprint(self) -> str:
        key = json.dumps([_file_json(f) for f in self.files], sort_keys=True)
        return hashlib.sha256(key.encode()).hexdigest()


def _file_json(f: InputFile) -> dict[str, Any]:
    """``dataclasses.asdict(f)``, without its generic (and slow) recursion."""
    return {"path": f.path, "rel": f.rel, "size": f.size, "mtime_ns": f.mtime_ns}


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
        "more": t.more,
    }
