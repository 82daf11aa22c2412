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
            stream, codec = f.stream, params.encoding
            try:
                if split.start == 0:
                    bom = bom_encoding(stream.peek(4)[:4])  # type: ignore[attr-defined]
                    if bom is not None:
                        codec = bom[0]
                        stream.read(bom[1])
                if codecs.lookup(codec).name != "utf-8":
                    stream = transcoded(stream, codec)
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
                        text = raw.decode("utf-8")
                    except UnicodeDecodeError as e:
                        where = f"{split.rel}:{line_no}"
                        message = f"invalid UTF-8 at byte {e.start}"
                        if params.invalid_utf8 == "drop":
                            report.record_error("invalid_utf8", where, message, raw)
                            continue
                        report.repair("invalid_utf8", where, message + " (replaced with U+FFFD)")
                        text = raw.decode("utf-8", "replace")
                    yield LineRecord(line_no, text.rstrip("\r\n"), nbytes)
            except UnicodeDecodeError as e:
                message = (
                    f"not valid {codec} (byte {e.start} of a read): set input.encoding to the file's encoding"
                )
                report.file_error("read_error", f"{split.rel}:{line_no + 1}", message)
            except (OSError, EOFError) as e:
                # truncated or corrupt compressed data: what was read so far is kept
                report.file_error("read_error", f"{split.rel}:{line_no + 1}", f"cannot read further: {e}")
            report.position = f.raw_position() - split.start


def _wide(path: str) -> bool:
    """True when the file starts with a UTF-16 or UTF-32 byte-order mark (cannot be cut at 0x0A)."""
    bom = bom_encoding(sniff(path, 4))
    return bom is not None and bom[0] != "utf-8"
