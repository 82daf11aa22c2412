"""Shared machinery for readers of line-oriented text (used by the jsonl and txt readers).

Handles, for one input split: decompression, bounded line length, UTF-8 policy, NUL bytes, and
line numbers, reporting every problem through a :class:`ReadReport` with ``file:line``.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Iterator
from dataclasses import dataclass

from dataprep.io import RawInput, bom_encoding, compression_of, iter_lines, line_splits, sniff, transcoded
from dataprep.recipe import InputParams
from dataprep.stage import InputSplit, Reader, ReadReport


@dataclass
class LineRecord:
    """One decoded line. text has its line ending removed; line is 1-based."""

    line: int
    text: str
    nbytes: int


class LineReader(Reader):
    """Base for readers whose records are lines: splittable when uncompressed."""

    splittable = True

    @classmethod
    def plan(cls, path: str, rel: str, params: InputParams) -> list[InputSplit]:
        if (
            compression_of(path) is None
            and codecs.lookup(params.encoding).name == "utf-8"
            and not _wide(path)
        ):
            return [
                InputSplit(path, rel, cls.name, start, end, first_line, end - start)
                for start, end, first_line in line_splits(path, params.split_bytes)
            ]
        return [InputSplit(path, rel, cls.name, nbytes=os.path.getsize(path))]

    @classmethod
    def chunkable(cls, params: InputParams) -> bool:
        return True

    def lines(self, split: InputSplit, report: ReadReport) -> Iterator[LineRecord]:
        """Decoded lines of the split, bad ones reported (and skipped) per the input policy."""
        params: InputParams = self.params
        limit = None if split.end < 0 else split.end - split.start
        try:
            raw_input = RawInput(split.path, split.start)
        except OSError as e:  # e.g. removed or replaced since the plan was made
            report.file_error("read_error", split.rel, f"cannot open since planning: {e.strerror or e}")
            return
        with raw_input as f:
            line_no = split.first_line - 1
            stream, codec = f.stream, codecs.lookup(params.encoding).name
            try:
                if split.start == 0:
                    head = stream.peek(HEAD_BYTES)[:HEAD_BYTES]  # type: ignore[attr-defined]
                    bom = bom_encoding(head)
                    if bom is not None:
                        codec = bom[0]
                        stream.read(bom[1])
                    elif codec != "utf-8" and _is_utf8_text(head):
                        report.repair(
                            "declared_encoding",
                            split.rel,
                            f"UTF-8 text, read as UTF-8 (input.encoding is {params.encoding})",
                        )
                        codec = "utf-8"
                wide = codec.startswith(("utf-16", "utf-32"))
                if wide:  # 0x0A is no line end in these: decoded first, the lines cut in UTF-8
                    stream = transcoded(stream, codec)
                line_codec = "utf-8" if wide else codec
                for raw in iter_lines(stream, params.max_line_bytes, limit):
                    line_no += 1
                    if not line_no & 1023:
                        report.position = f.raw_position() - split.start
                    if raw is None:
                        where = f"{split.rel}:{line_no}"
                        report.record_error(
                            "line_too_long",
                            where,
                            f"line longer than input.max_line_bytes={params.max_line_bytes}",
                        )
                        continue
                    nbytes = len(raw)
                    nuls = raw.count(b"\x00")
                    if nuls:
                        report.repair("nul_bytes", f"{split.rel}:{line_no}", f"{nuls} NUL byte(s) removed")
                        raw = raw.replace(b"\x00", b"")
                    try:
                        text = raw.decode(line_codec)
                    except UnicodeDecodeError as e:
                        where = f"{split.rel}:{line_no}"
                        kind = "invalid_utf8" if codec == "utf-8" else "invalid_encoding"
                        message = f"invalid {'UTF-8' if codec == 'utf-8' else codec} at byte {e.start}"
                        if wide:  # what the transcoder let through: an unpaired surrogate
                            message = f"unpaired surrogate in {codec} text"
                        if params.invalid_utf8 == "drop":
                            report.record_error(kind, where, message, raw.decode(line_codec, "replace"))
                            continue
                        report.repair(kind, where, message + " (replaced with U+FFFD)")
                        text = raw.decode(line_codec, "replace")
                    yield LineRecord(line_no, text.rstrip("\r\n"), nbytes)
            except UnicodeDecodeError as e:  # UTF-16/32 only: an unpaired surrogate, a cut character
                message = (
                    f"not valid {codec} (byte {e.start} of a read): set input.encoding to the file's encoding"
                )
                report.file_error("read_error", f"{split.rel}:{line_no + 1}", message)
            except (OSError, EOFError) as e:
                # truncated or corrupt compressed data: what was read so far is kept
                report.file_error("read_error", f"{split.rel}:{line_no + 1}", f"cannot read further: {e}")
            report.position = f.raw_position() - split.start


HEAD_BYTES = 8192  # what the planner sniffs of a file


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


def _wide(path: str) -> bool:
    """True when the file starts with a UTF-16 or UTF-32 byte-order mark (cannot be cut at 0x0A)."""
    bom = bom_encoding(sniff(path, 4))
    return bom is not None and bom[0] != "utf-8"
