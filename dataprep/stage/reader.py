"""Reading the input: :class:`InputSplit` (one unit of input work), the :class:`Reader` stage kind
that turns a split into documents, and :class:`ReadReport`, which records bad input and applies
the ``input.on_error`` policy."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dataprep.document import Document, Drop
from dataprep.stage.protocol import Stage
from dataprep.stats import StageStats


@dataclass
class InputSplit:
    """A unit of input work: a file, or a byte range of an uncompressed line-oriented file.
    A value: never changed once made (not a frozen dataclass only because a plan makes one per
    small input file, and a frozen one takes four times as long to build: 2.5 against 0.5 µs).

    path: absolute path. rel: path relative to the input root (used in document ids).
    start/end: byte range (end = -1 means to the end). first_line: 1-based line number at start.
    nbytes: on-disk bytes this split accounts for (progress and scheduling); for a group, all of
    its parts' bytes.
    sha256: the sha256 (hex) of the split's on-disk bytes when planning read them all (a small
    file, a range of a file cut at line starts), which the reader checks as it reads; "" when not.
    sniff: the split is a small file whole that planning did not open (it only listed it), so
    the reader that reads it checks that its first bytes are text (as planning checks the files
    it sniffs): a file that is not gets its note (binary, not UTF-8) and yields no record.
    more: further splits of the same task, read after this one in order (small files grouped
    into one task of about the target size); each as the list of its first seven to nine fields.
    """

    path: str
    rel: str
    reader: str
    start: int = 0
    end: int = -1
    first_line: int = 1
    nbytes: int = 0
    sha256: str = ""
    sniff: bool = False
    more: list[list[Any]] = field(default_factory=list)

    def parts(self) -> list[InputSplit]:
        """The splits this task reads, in order (itself alone unless it is a group)."""
        if not self.more:
            return [self]
        nbytes = self.nbytes - sum(int(m[6]) for m in self.more)
        first = dataclasses.replace(self, nbytes=nbytes, more=[])
        return [first, *(InputSplit(*m) for m in self.more)]


def read_task(split: InputSplit, reader: Callable[[str], Reader], report: ReadReport) -> Iterator[Document]:
    """The documents of a task: each of ``split.parts()`` read by ``reader(part.reader)`` in
    order. ``report.position`` counts on-disk bytes from the task's start (the parts before the
    current one in full)."""
    done = 0
    for part in split.parts():
        report.base = done
        report.position = 0
        yield from reader(part.reader).read(part, report)
        done += part.nbytes
    report.base = 0
    report.position = done


class InputError(Exception):
    """Bad input under ``on_error: stop``; the message names the file and line."""


class Reader(Stage):
    """Turns one input split into documents, reporting bad records through ``report``.

    extensions: logical suffixes this reader handles (after removing .gz/.zst).
    splittable: an uncompressed file may be cut into line-aligned byte ranges.
    """

    kind = "reader"
    extensions: ClassVar[tuple[str, ...]] = ()
    splittable: ClassVar[bool] = False

    def read(self, split: InputSplit, report: ReadReport) -> Iterator[Document]:
        raise NotImplementedError

    @classmethod
    def chunkable(cls, params: Any) -> bool:
        """True when a decompressed copy of the file may be cut at any line end into splits."""
        return False


class ReadReport:
    """Collects a reader's bad-input events for one split and applies the error policy.

    Errors (malformed record, missing field, over-long line, binary file, undecodable text under
    ``invalid_utf8: drop``) are recorded with file and line; under ``on_error: stop`` the first one
    raises :class:`InputError`. Repairs (replacing invalid UTF-8, stripping NUL bytes) are counted
    and sampled but never stop a run. Record-level errors count as drops of the reader stage so the
    accounting stays exact; file-level ones (binary, empty, unreadable) are counted per file.
    """

    SAMPLES_PER_KIND = 20

    def __init__(self, stats: StageStats, on_error: str, rejected: Any = None):
        self.stats = stats
        self.on_error = on_error
        self.rejected = rejected
        self.samples: dict[str, list[dict[str, Any]]] = {}
        self.position = 0  # on-disk bytes consumed so far in the current split (progress)
        self.base = 0  # on-disk bytes of the task's parts before the current one (groups)
        # [rel, start, end, sha256] of every input byte range read whole (see LineReader.lines)
        self.read_sha256: list[list[Any]] = []
        self.file_notes: list[dict[str, str]] = []  # of the files read whole that yield nothing

    def _sample(self, kind: str, where: str, message: str) -> None:
        bucket = self.samples.setdefault(kind, [])
        if len(bucket) < self.SAMPLES_PER_KIND:
            bucket.append({"where": where, "message": message})

    def record_error(self, kind: str, where: str, message: str, raw: bytes | str = b"") -> None:
        """A record that cannot become a document: dropped under ``kind`` (or stop the run)."""
        self.stats.docs_in += 1
        if self.on_error == "stop":
            raise InputError(
                f"{where}: {message} (input.on_error is 'stop'; fix the input or set it to 'skip')"
            )
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        self.stats.drop(kind, len(text), where)
        self._sample(kind, where, message)
        if self.rejected is not None:
            self.rejected.write(
                Drop(
                    Document(id=where, text=text[:10_000], source=where.rsplit(":", 1)[0]),
                    kind,
                    detail=message,
                ),
                "read",
            )

    def file_error(self, kind: str, where: str, message: str) -> None:
        """A whole file skipped (binary, unreadable) or noted (empty); counted per kind."""
        self.stats.count(f"files.{kind}")
        if self.on_error == "stop" and kind != "empty_file":
            raise InputError(
                f"{where}: {message} (input.on_error is 'stop'; fix the input or set it to 'skip')"
            )
        self._sample(kind, where, message)

    def file_note(self, kind: str, rel: str, message: str) -> None:
        """A whole file that yields no document (binary, not UTF-8): :meth:`file_error`, and its
        note kept in ``file_notes`` (file, kind, message) as planning keeps those it finds."""
        self.file_error(kind, rel, message)
        self.file_notes.append({"file": rel, "kind": kind, "message": message})

    def repair(self, kind: str, where: str, message: str) -> None:
        """A record kept after a repair (e.g. invalid UTF-8 replaced): counted and sampled."""
        self.stats.count(f"repaired.{kind}")
        self._sample(kind, where, message)

    def emit(self, doc: Document) -> Document:
        self.stats.docs_in += 1
        self.stats.docs_out += 1
        self.stats.chars_out += len(doc.text)
        self.stats.chars_in += len(doc.text)
        return doc
