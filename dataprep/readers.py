"""Shared machinery for readers of line-oriented text (used by the jsonl and txt readers).

Handles, for one input split: decompression, bounded line length, UTF-8 policy, NUL bytes, and
line numbers, reporting every problem through a :class:`ReadReport` with ``file:line``.
"""

from __future__ import annotations

import codecs
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dataprep.io import (
    SNIFF_BYTES,
    RawInput,
    bom_encoding,
    compression_of,
    is_utf8,
    iter_lines,
    line_ranges,
    sniff,
    transcoded,
)
from dataprep.recipe import InputParams
from dataprep.stage.reader import InputError, InputSplit, Reader, ReadReport
from dataprep.textcheck import text_note


@dataclass
class LineRecord:
    """One decoded line. text has its line ending removed; line is 1-based. ``value``: what a
    reader's :meth:`LineReader.parse_raw` made of the raw line, in place of the text (None: the
    text is there)."""

    line: int
    text: str
    nbytes: int
    value: Any = None


class InputChanged(InputError):
    """An input's bytes no longer hash to what the run recorded when it planned them (edited
    since, even with its size and time kept); the message names the file and the byte range,
    ``rel`` the file."""

    def __init__(self, rel: str, message: str):
        super().__init__(rel, message)
        self.rel = rel

    def __str__(self) -> str:
        return str(self.args[1])


class LineReader(Reader):
    """Base for readers whose records are lines: splittable when uncompressed.

    Reading a split hashes its on-disk bytes (sha256) as they are read, at no extra read:
    ``report.read_sha256`` gets [path, start, end, sha256] per split read, and a split that
    carries the sha256 planning saw (:attr:`InputSplit.sha256`) is checked against it."""

    splittable = True

    @classmethod
    def whole_file(cls, params: InputParams) -> bool:
        """True when the reader's records may straddle any byte offset (never cut the file)."""
        return False

    @classmethod
    def plan(cls, path: str, rel: str, params: InputParams) -> list[InputSplit]:
        return cls.plan_hashed(path, rel, params)[0]

    @classmethod
    def plan_hashed(
        cls, path: str, rel: str, params: InputParams, head: bytes | None = None, size: int | None = None
    ) -> tuple[list[InputSplit], str | None]:
        """(the file's splits, the sha256 of the whole file when planning read all of it, else
        None). An uncompressed UTF-8 file larger than ``params.split_bytes`` is read once to cut
        it at line starts, each range's sha256 hashed on the way; a file ``head`` holds whole (its
        first bytes, when the caller has sniffed them; ``size``: its size when known) gets its
        sha256 from them. Others are one split, not read here."""
        size = os.path.getsize(path) if size is None else size
        if (
            compression_of(path) is not None
            or cls.whole_file(params)
            or not is_utf8(params.encoding)
            or _wide(path, head)
        ):
            return [InputSplit(path, rel, cls.name, nbytes=size)], None
        if size <= params.split_bytes:
            digest = hashlib.sha256(head).hexdigest() if head is not None and len(head) == size else ""
            return [InputSplit(path, rel, cls.name, 0, size, 1, size, digest)], digest or None
        cuts, digests, digest = line_ranges(path, params.split_bytes)
        splits = [
            InputSplit(path, rel, cls.name, start, end, first_line, end - start, part)
            for (start, end, first_line), part in zip(cuts, digests, strict=True)
        ]
        return splits, digest

    @classmethod
    def chunkable(cls, params: InputParams) -> bool:
        return True

    def lines(self, split: InputSplit, report: ReadReport) -> Iterator[LineRecord]:
        """Decoded lines of the split, bad ones reported (and skipped) per the input policy. A
        small range of an uncompressed UTF-8 file (a small file whole) is read in one call."""
        params: InputParams = self.params
        if (
            0 <= split.end - split.start <= SMALL_SPLIT_BYTES
            and compression_of(split.path) is None
            and is_utf8(params.encoding)
        ):
            try:
                small = _read_small(split, params.max_line_bytes)
            except OSError as e:  # e.g. removed or replaced since the plan was made
                report.file_error("read_error", split.rel, f"cannot open since planning: {e.strerror or e}")
                return
            if small is not None:
                raws, end, digest, head = small
                if split.sniff and not self._reads_as_text(split, report, head):
                    raws = []
                line_no = split.first_line - 1
                for raw in raws:
                    line_no += 1
                    record = self._record(split, report, line_no, raw)
                    if record is not None:
                        yield record
                report.position = end - split.start
                self._read(split, report, end, digest)
                return
        limit = None if split.end < 0 else split.end - split.start
        text = True  # the split's bytes are text: planning checked them, or the reader does below
        try:
            raw_input = RawInput(split.path, split.start, split.end, hashed=True)
        except OSError as e:  # e.g. removed or replaced since the plan was made
            report.file_error("read_error", split.rel, f"cannot open since planning: {e.strerror or e}")
            return
        with raw_input as f:
            line_no = split.first_line - 1
            stream, codec = f.stream, codecs.lookup(params.encoding).name
            try:
                if split.start == 0:
                    head = stream.peek(SNIFF_BYTES)[:SNIFF_BYTES]  # type: ignore[attr-defined]
                    text = not split.sniff or self._reads_as_text(split, report, head)
                    bom = bom_encoding(head)
                    if bom is not None:
                        codec = bom[0]
                        stream.read(bom[1])
                    elif not is_utf8(codec) and _is_utf8_text(head):
                        report.repair(
                            "declared_encoding",
                            split.rel,
                            f"UTF-8 text, read as UTF-8 (input.encoding is {params.encoding})",
                        )
                        codec = "utf-8"
                wide = codec.startswith(("utf-16", "utf-32"))
                if wide:  # 0x0A is no line end in these: decoded first, the lines cut in UTF-8
                    stream = transcoded(stream, codec)
                    limit = None  # the file whole (never cut), whose lines are counted decoded
                for raw in iter_lines(stream, params.max_line_bytes, limit) if text else ():
                    line_no += 1
                    if not line_no & 1023:
                        report.position = f.raw_position() - split.start
                    record = self._record(split, report, line_no, raw, codec)
                    if record is not None:
                        yield record
            except UnicodeDecodeError as e:  # UTF-16/32 only: an unpaired surrogate, a cut character
                message = (
                    f"not valid {codec} (byte {e.start} of a read): set input.encoding to the file's encoding"
                )
                report.file_error("read_error", f"{split.rel}:{line_no + 1}", message)
            except (OSError, EOFError) as e:
                # truncated or corrupt compressed data: what was read so far is kept
                report.file_error("read_error", f"{split.rel}:{line_no + 1}", f"cannot read further: {e}")
            report.position = f.raw_position() - split.start
            end, digest = f.sha256()
        self._read(split, report, end, digest)

    def _record(
        self, split: InputSplit, report: ReadReport, line_no: int, raw: bytes | None, codec: str = "utf-8"
    ) -> LineRecord | None:
        """Line ``line_no`` of the split (its raw bytes, newline included; None when too long) as
        a record, or None when it is dropped (reported). ``codec`` is the file's encoding: a line
        of a legacy encoding is decoded alone (a bad byte costs its own line); UTF-16/32 arrive
        transcoded to UTF-8."""
        params: InputParams = self.params
        if raw is not None and codec == "utf-8":
            value = self.parse_raw(raw)
            if value is not None:
                return LineRecord(line_no, "", len(raw), value)
        if raw is None:
            where = f"{split.rel}:{line_no}"
            report.record_error(
                "line_too_long", where, f"line longer than input.max_line_bytes={params.max_line_bytes}"
            )
            return None
        nbytes = len(raw)
        nuls = raw.count(b"\x00")
        if nuls:
            report.repair("nul_bytes", f"{split.rel}:{line_no}", f"{nuls} NUL byte(s) removed")
            raw = raw.replace(b"\x00", b"")
        wide = codec.startswith(("utf-16", "utf-32"))
        line_codec = "utf-8" if wide else codec
        try:
            text = raw.decode(line_codec)
        except UnicodeDecodeError as e:
            where = f"{split.rel}:{line_no}"
            utf8 = is_utf8(codec)
            kind = "invalid_utf8" if utf8 else "invalid_encoding"
            message = f"invalid {'UTF-8' if utf8 else codec} at byte {e.start}"
            if wide:  # what the transcoder let through: an unpaired surrogate
                message = f"unpaired surrogate in {codec} text"
            if params.invalid_utf8 == "drop":
                report.record_error(kind, where, message, raw.decode(line_codec, "replace"))
                return None
            report.repair(kind, where, message + " (replaced with U+FFFD)")
            text = raw.decode(line_codec, "replace")
        return LineRecord(line_no, text.rstrip("\r\n"), nbytes)

    def _reads_as_text(self, split: InputSplit, report: ReadReport, head: bytes) -> bool:
        """For a small file planning left unsniffed (:attr:`InputSplit.sniff`), whose first
        bytes are ``head``: True, and the file counted read, when they read as text in the
        declared encoding; else False, and the file noted (binary, not UTF-8) as planning notes
        the files it sniffs (under ``on_error: stop`` the note stops the run)."""
        note = text_note(head, self.params.encoding)
        if note is None:
            report.stats.count("files.read")
            return True
        report.file_note(note[0], split.rel, note[1])
        return False

    def parse_raw(self, raw: bytes) -> Any:
        """A reader's value of a raw UTF-8 line (newline included) when it can make it straight
        from the bytes, exactly as from the decoded text; None sends the line the general way
        (decoded, repaired and reported as needed, then given to the reader as text)."""
        return None

    @staticmethod
    def _read(split: InputSplit, report: ReadReport, end: int, digest: str) -> None:
        """Record that the split's bytes [start, end) hash to ``digest``; InputChanged when
        planning saw other bytes there."""
        report.read_sha256.append([split.path, split.start, end, digest])
        if split.sha256 and digest != split.sha256:
            raise InputChanged(
                split.rel,
                f"{split.rel}: its content changed since this run planned it (sha256 of bytes "
                f"{split.start}-{end}); rerun with --overwrite to start over",
            )


def _is_utf8_text(head: bytes) -> bool:
    """True when ``head`` (a file's first bytes) is UTF-8 with some non-ASCII text in it (64
    bytes or more; an ASCII head decodes alike in every legacy encoding, and a few bytes of
    GB18030 or Big5 can be valid UTF-8 by chance), a multi-byte character cut at its end
    allowed."""
    if sum(b >= 0x80 for b in head) < 64:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start >= len(head) - 3 and e.reason == "unexpected end of data"
    return True


SMALL_SPLIT_BYTES = 1 << 20  # a range this small is read in one call (no stream, no buffer)


def _read_small(split: InputSplit, max_line_bytes: int) -> tuple[list[bytes | None], int, str, bytes] | None:
    """(the raw lines of a small range [start, end) of an uncompressed file, as
    :func:`iter_lines` yields them; the end of the bytes read; their sha256; their first
    SNIFF_BYTES), read in one call;
    None when the streaming path must read it instead: a UTF-16/32 byte-order mark, or a last
    line that runs past the range's end (the file changed since it was planned)."""
    want = split.end - split.start
    with open(split.path, "rb", buffering=0) as f:
        if split.start:
            f.seek(split.start)
        data = f.read(want)
        while len(data) < want and (more := f.read(want - len(data))):
            data += more
        if data and len(data) == want and not data.endswith(b"\n") and f.read(1):
            return None
    end, digest, head = split.start + len(data), hashlib.sha256(data).hexdigest(), data[:SNIFF_BYTES]
    if split.start == 0:
        bom = bom_encoding(data[:4])
        if bom is not None:
            if bom[0] != "utf-8":
                return None
            data = data[bom[1] :]
    pieces = data.split(b"\n")
    raws: list[bytes | None] = [None if len(p) > max_line_bytes else p + b"\n" for p in pieces[:-1]]
    if pieces[-1]:
        raws.append(None if len(pieces[-1]) > max_line_bytes else pieces[-1])
    return raws, end, digest, head


def _wide(path: str, head: bytes | None = None) -> bool:
    """True when the file (whose first bytes are ``head``, when given) starts with a UTF-16 or
    UTF-32 byte-order mark (cannot be cut at 0x0A)."""
    bom = bom_encoding(sniff(path, 4) if head is None else head[:4])
    return bom is not None and bom[0] != "utf-8"
