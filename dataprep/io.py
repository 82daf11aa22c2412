"""Byte-level input plumbing: transparent decompression, bounded line reading, UTF-8 policy,
binary sniffing, and atomic writes.

Everything here streams: no function reads a whole file into memory.
"""

from __future__ import annotations

import codecs
import functools
import gzip
import hashlib
import io
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

COMPRESSED_SUFFIXES = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}
READ_BUFFER = 1 << 20


def _suffix(name: str) -> str:
    """The last suffix of a file name, as ``Path(name).suffix`` has it ('.gz'; '' for '.bashrc')."""
    dot = name.rfind(".")
    return name[dot:] if 0 < dot < len(name) - 1 else ""


@functools.lru_cache(maxsize=64)
def is_utf8(codec: str) -> bool:
    """True when ``codec`` names UTF-8 (any alias Python's codecs accept)."""
    import codecs

    return codecs.lookup(codec).name == "utf-8"


def compression_of(path: str | Path) -> str | None:
    """'gzip', 'zstd' or None, from the file name (its suffix as :func:`_suffix` has it; called
    for every file a plan and a task meet, so it does not split the path)."""
    name = os.fspath(path)
    dot = name.rfind(".")
    if dot <= name.rfind(os.sep) + 1 or dot == len(name) - 1:
        return None
    return COMPRESSED_SUFFIXES.get(name[dot:].lower())


def logical_suffix(path: str | Path) -> str:
    """The format suffix under any compression suffix: 'a.jsonl.gz' -> '.jsonl' (as
    :func:`_suffix` of the file name has them; without splitting the path)."""
    name = os.fspath(path)
    start = name.rfind(os.sep) + 1
    dot = name.rfind(".", start)
    if dot > start and dot < len(name) - 1 and name[dot:].lower() in COMPRESSED_SUFFIXES:
        name = name[:dot]
        dot = name.rfind(".", start)
    return name[dot:].lower() if start < dot < len(name) - 1 else ""


class _HashedFile(io.RawIOBase):
    """The on-disk bytes of a file from ``start``, hashing (sha256) those of [start, end) as they
    are read (``end`` -1: to the end of the file), whatever read-ahead reads beyond."""

    def __init__(self, path: str | Path, start: int, end: int):
        self._file = io.FileIO(path, "rb")
        if start:
            self._file.seek(start)
        self.start, self.end, self.pos = start, end, start
        self.hash = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        n = self._file.readinto(buffer)
        if n:
            take = n if self.end < 0 else max(0, min(n, self.end - self.pos))
            if take:
                self.hash.update(memoryview(buffer)[:take])
            self.pos += n
        return n

    def tell(self) -> int:
        return self.pos

    def finish(self) -> tuple[int, str]:
        """(the end of the hashed range, the sha256 hex of [start, that end)): the rest of the
        range is read first when the reader stopped short of it (an error, a line limit)."""
        while self.end < 0 or self.pos < self.end:
            block = self._file.read(
                READ_BUFFER * 8 if self.end < 0 else min(READ_BUFFER * 8, self.end - self.pos)
            )
            if not block:
                break
            self.hash.update(block)
            self.pos += len(block)
        return (self.pos if self.end < 0 else min(self.pos, self.end)), self.hash.hexdigest()

    def close(self) -> None:
        self._file.close()
        super().close()


class RawInput:
    """An input file opened for streaming, decompressed when its name says so.

    ``stream`` yields decompressed bytes; ``raw_position()`` is the offset in the on-disk file,
    which is what progress and ETA are measured in. With ``hashed``, the on-disk bytes of
    [start, end) are hashed as they are read: :meth:`sha256` (end -1: the whole file).
    """

    def __init__(self, path: str | Path, start: int = 0, end: int = -1, hashed: bool = False):
        self.path = Path(path)
        kind = compression_of(self.path)
        if kind and start:
            raise ValueError(f"{self.path}: cannot seek inside a {kind} file")
        self._hashed: _HashedFile | None = None
        if hashed:
            self._hashed = _HashedFile(self.path, start, end)
            self._raw = io.BufferedReader(self._hashed, READ_BUFFER)
        else:
            self._raw = open(self.path, "rb", buffering=READ_BUFFER)  # noqa: SIM115 (closed in close())
            if start:
                self._raw.seek(start)
        self.stream: BinaryIO
        if kind == "gzip":
            self.stream = gzip.GzipFile(fileobj=self._raw, mode="rb")  # type: ignore[assignment]
        elif kind == "zstd":
            import zstandard

            reader = zstandard.ZstdDecompressor().stream_reader(self._raw, read_across_frames=True)
            self.stream = io.BufferedReader(_CheckedZstd(reader, self.path), READ_BUFFER)
        else:
            self.stream = self._raw  # type: ignore[assignment]

    def raw_position(self) -> int:
        return self._raw.tell()

    def sha256(self) -> tuple[int, str]:
        """(end, sha256 hex) of the on-disk bytes [start, end) of a ``hashed`` input; the rest of
        the range is read if the reader stopped before its end. Call once, when done reading."""
        assert self._hashed is not None, "opened without hashed=True"
        return self._hashed.finish()

    def close(self) -> None:
        if self.stream is not self._raw:
            self.stream.close()
        self._raw.close()

    def __enter__(self) -> RawInput:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


BOMS = [  # longest first: the UTF-32 LE mark starts with the UTF-16 LE one
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xef\xbb\xbf", "utf-8"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
]


_BOM_FIRST_BYTES = {mark[:1] for mark, _ in BOMS}


def bom_encoding(head: bytes) -> tuple[str, int] | None:
    """(codec, mark length) when ``head`` starts with a Unicode byte-order mark, else None."""
    if head[:1] not in _BOM_FIRST_BYTES:
        return None
    for mark, codec in BOMS:
        if head.startswith(mark):
            return codec, len(mark)
    return None


def head_at_line_end(head: bytes) -> bytes:
    """``head`` (the first bytes of a longer file) cut after its last newline byte (the 0x00 that
    follows it kept, as in UTF-16-LE); ``head`` as it is when it has none."""
    cut = head.rfind(b"\n") + 1
    if cut == 0:
        return head
    return head[: cut + 1] if head[cut : cut + 1] == b"\x00" else head[:cut]


def guess_encoding(head: bytes, whole: bool) -> str | None:
    """The Python codec name charset-normalizer gives the text whose first bytes are ``head``
    (``whole``: all of it), or None. A head cut inside a character is valid text in no encoding,
    so a cut one is tried ending at a newline byte (ASCII-compatible encodings), then at a
    multiple of 4 bytes (UTF-16/32). About 0.5-0.8 ms of CPU per 8 KiB head
    (bench/bench_charset.py)."""
    from charset_normalizer import from_bytes

    for candidate in [head] if whole else [head_at_line_end(head), head[: len(head) // 4 * 4]]:
        best = from_bytes(candidate).best()
        if best is not None:
            return codecs.lookup(best.encoding).name
    return None


def transcoded(stream: BinaryIO, codec: str) -> BinaryIO:
    """``stream`` (positioned after any byte-order mark) decoded from ``codec`` and re-encoded
    as UTF-8, streaming. An unpaired UTF-16 surrogate passes through (as bytes that are no
    UTF-8, which the line that holds it reports); other undecodable bytes (a cut last
    character) raise UnicodeDecodeError at the read that meets them."""
    reader = codecs.getreader(codec)(stream, errors="surrogatepass")

    class _Utf8(io.RawIOBase):
        pending = b""

        def readable(self) -> bool:
            return True

        def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
            while not self.pending:
                text = reader.read(READ_BUFFER)
                if not text:
                    return 0
                self.pending = text.encode("utf-8", "surrogatepass")
            n = min(len(buffer), len(self.pending))
            buffer[:n] = self.pending[:n]
            self.pending = self.pending[n:]
            return n

    return io.BufferedReader(_Utf8(), READ_BUFFER)  # type: ignore[return-value]


class _CheckedZstd(io.RawIOBase):
    """A zstandard stream reader that raises EOFError at the end of a truncated file: the
    library's reader just stops where the data stops, so at the end the frame layout of the file
    is walked (:func:`zstd_frames_complete`) to tell a complete file from a cut one."""

    def __init__(self, reader: io.RawIOBase, path: Path):
        self._reader, self._path = reader, path

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        n = self._reader.readinto(buffer)
        if n == 0 and len(buffer):
            problem = zstd_frames_complete(self._path)
            if problem:
                raise EOFError(problem)
        return n

    def close(self) -> None:
        self._reader.close()
        super().close()


ZSTD_MAGIC = 0xFD2FB528


def zstd_frames_complete(path: str | Path) -> str:
    """ "" when the file is a sequence of complete zstd (or skippable) frames, else what is wrong
    (the file ends inside a frame, or bytes that are no frame follow one). Reads only the frame
    and block headers (3 bytes per block of up to 128 KiB), seeking over the block contents."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        pos = 0
        while pos < size:
            head = f.read(4)
            if len(head) < 4:
                return f"the file ends inside a frame header at byte {pos} (truncated)"
            magic = int.from_bytes(head, "little")
            if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
                n = f.read(4)
                if len(n) < 4:
                    return f"the file ends inside a frame header at byte {pos} (truncated)"
                pos += 8 + int.from_bytes(n, "little")
                f.seek(pos)
                continue
            if magic != ZSTD_MAGIC:
                return f"bytes at {pos} are not a zstd frame"
            fhd = f.read(1)
            if not fhd:
                return f"the file ends inside a frame header at byte {pos} (truncated)"
            d = fhd[0]
            fcs_flag, single, checksum, dict_flag = d >> 6, (d >> 5) & 1, (d >> 2) & 1, d & 3
            header = (0 if single else 1) + (0, 1, 2, 4)[dict_flag]
            header += (1 if single else 0, 2, 4, 8)[fcs_flag]
            pos += 5 + header
            f.seek(pos)
            while True:
                bh = f.read(3)
                if len(bh) < 3:
                    return f"the file ends inside a frame at byte {size} (truncated)"
                v = int.from_bytes(bh, "little")
                last, kind, bsize = v & 1, (v >> 1) & 3, v >> 3
                pos += 3 + (1 if kind == 1 else bsize)
                if pos > size:
                    return f"the file ends inside a frame at byte {size} (truncated)"
                f.seek(pos)
                if last:
                    break
            pos += 4 * checksum
            if pos > size:
                return f"the file ends inside a frame at byte {size} (truncated)"
            f.seek(pos)
    return ""


def iter_lines(stream: BinaryIO, max_bytes: int, limit_bytes: int | None = None) -> Iterator[bytes | None]:
    """Yield raw lines (with their newline) from ``stream``; a line longer than ``max_bytes`` is
    consumed in bounded chunks and yielded as ``None`` so memory never holds it whole.

    limit_bytes: stop once this many bytes have been consumed (a line that starts before the
    limit is read to its end). Used for byte-range splits of uncompressed files.
    """
    consumed = 0
    while limit_bytes is None or consumed < limit_bytes:
        line = stream.readline(max_bytes + 1)
        if not line:
            return
        consumed += len(line)
        if len(line) > max_bytes and not line.endswith(b"\n"):
            while True:
                chunk = stream.readline(READ_BUFFER)
                consumed += len(chunk)
                if not chunk or chunk.endswith(b"\n"):
                    break
            yield None
        else:
            yield line


CONTROL_BYTES = bytes([*range(0x00, 0x09), *range(0x0E, 0x1B), *range(0x1C, 0x20)])  # not \t\n\v\f\r, ESC


def control_bytes(data: bytes) -> int:
    """How many bytes of ``data`` are control bytes other than tab, newline, VT, FF, CR and ESC."""
    return len(data) - len(data.translate(None, CONTROL_BYTES))


def undecodable_bytes(data: bytes) -> int:
    """How many bytes of ``data`` are not part of a UTF-8 character (0 for valid UTF-8)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return len(data) - len(data.decode("utf-8", "ignore").encode("utf-8"))
    return 0


def looks_binary(head: bytes) -> bool:
    """True when the first bytes of a (decompressed) file are clearly not text.

    Rule: more than 10% control bytes other than tab/newline/CR/FF/ESC, or more than 30% of the
    bytes not decodable as UTF-8. A text file with a stray NUL or a few bad bytes stays text.
    """
    if not head:
        return False
    controls = control_bytes(head)
    if controls > 0.10 * len(head):
        return True
    bad = undecodable_bytes(head)
    # a multi-byte character cut at the end of the sniffed block is not evidence of binary
    return bad - 3 > 0.30 * len(head)


SNIFF_BYTES = 8192


def sniff(path: str | Path, size: int = SNIFF_BYTES) -> bytes:
    """The first ``size`` decompressed bytes of a file (raises OSError/EOFError on corrupt input)."""
    if compression_of(path) is None:
        with open(path, "rb", buffering=0) as raw:
            return raw.read(size)
    with RawInput(path) as f:
        if isinstance(f.stream, io.BufferedReader) and isinstance(f.stream.raw, _CheckedZstd):
            # past the buffer's read-ahead a truncated file's end would raise: read only ``size``
            out = b""
            while len(out) < size and (piece := f.stream.raw.read(size - len(out))):
                out += piece
            return out
        return f.stream.read(size)


def file_sha256(path: str | Path, start: int = 0, end: int = -1) -> str:
    """The sha256 (hex) of a file's bytes [start, end) (``end`` -1: to the end of the file)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if start:
            f.seek(start)
        left = -1 if end < 0 else end - start
        while left:
            chunk = f.read(READ_BUFFER * 8 if left < 0 else min(left, READ_BUFFER * 8))
            if not chunk:
                break
            h.update(chunk)
            left -= len(chunk) if left > 0 else 0
    return h.hexdigest()


def line_splits(path: str | Path, split_bytes: int) -> list[tuple[int, int, int]]:
    """Cut an uncompressed line-oriented file into ranges of about ``split_bytes``.

    Returns [(start, end, first_line)], ranges aligned to line starts, first_line 1-based.
    Reads the file once, counting newlines (bytes.count runs at memory speed).
    """
    size = os.path.getsize(path)
    if size <= split_bytes:
        return [(0, size, 1)]
    return line_ranges(path, split_bytes)[0]


def line_ranges(path: str | Path, split_bytes: int) -> tuple[list[tuple[int, int, int]], list[str], str]:
    """:func:`line_splits` of a file, read once whatever its size, with the sha256 (hex) of each
    range's bytes and of the whole file, hashed as the same read passes."""
    size = os.path.getsize(path)
    splits: list[tuple[int, int, int]] = []
    digests: list[str] = []
    whole, part = hashlib.sha256(), hashlib.sha256()
    start, start_line = 0, 1
    lines_before = 0  # newlines in [0, pos)
    pos = 0
    target = split_bytes
    with open(path, "rb") as f:
        while True:
            chunk = f.read(READ_BUFFER * 8)
            if not chunk:
                break
            whole.update(chunk)
            view = memoryview(chunk)
            hashed = 0  # bytes of this chunk in ``part`` already
            chunk_end = pos + len(chunk)
            while target < chunk_end:
                cut = chunk.find(b"\n", max(target - pos, 0))
                if cut < 0:
                    break  # the cut point is in a later chunk
                boundary = pos + cut + 1
                line_at_boundary = lines_before + chunk.count(b"\n", 0, cut + 1) + 1
                if boundary < size:
                    part.update(view[hashed : cut + 1])
                    hashed = cut + 1
                    splits.append((start, boundary, start_line))
                    digests.append(part.hexdigest())
                    part = hashlib.sha256()
                    start, start_line = boundary, line_at_boundary
                target = boundary + split_bytes
            part.update(view[hashed:])
            lines_before += chunk.count(b"\n")
            pos = chunk_end
    splits.append((start, pos, start_line))
    digests.append(part.hexdigest())
    return splits, digests, whole.hexdigest()


def decompress_chunks(
    path: str | Path, prefix: Path, chunk_bytes: int, max_line_bytes: int | None = None
) -> tuple[list[tuple[Path, int, int]], tuple[int, str] | None, str]:
    """Decompress ``path`` into plain files ``<prefix>.NNNNN`` of about ``chunk_bytes``, cut at line
    ends (over-long lines are copied in pieces, never held whole).

    With ``max_line_bytes``, a line longer than that is cut after ``max_line_bytes + 1`` bytes (its
    newline kept): :func:`iter_lines` at that limit still finds it too long, on the same line, and
    the chunks never hold its bytes (a 1 GB line costs a few bytes of disk, not 1 GB). Without it,
    the copy is byte-exact.

    Returns ([(chunk path, first line (1-based), bytes)], None, or (the line that could not be
    read, the message) when the compressed data ended early or is corrupt: the chunks hold every
    line before it, as :meth:`LineReader.lines` reading the file itself would; the sha256 (hex)
    of the compressed file, hashed by the same read).
    """
    chunks: list[tuple[Path, int, int]] = []
    prefix.parent.mkdir(parents=True, exist_ok=True)
    line, error = 1, None
    out = None
    keep = None if max_line_bytes is None else max_line_bytes + 1
    in_line = 0  # bytes of the current line read so far
    with RawInput(path, hashed=True) as f:
        try:
            while True:
                piece = f.stream.readline(READ_BUFFER)
                if not piece:
                    break
                if out is None:
                    chunk = prefix.with_name(f"{prefix.name}.{len(chunks):05d}")
                    out = open(chunk, "wb")  # noqa: SIM115 (closed below)
                    chunks.append((chunk, line, 0))
                ends = piece.endswith(b"\n")
                if keep is None or in_line + len(piece) <= keep:
                    out.write(piece)
                else:  # an over-long line: only its first ``keep`` bytes, then its newline
                    out.write(piece[: max(keep - in_line, 0)])
                    if ends:
                        out.write(b"\n")
                in_line = 0 if ends else in_line + len(piece)
                if ends:
                    line += 1
                    if out.tell() >= chunk_bytes:
                        out.close()
                        out = None
        except (OSError, EOFError) as e:
            error = (line, f"cannot read further: {e}")
        finally:
            if out is not None:
                out.close()
        digest = f.sha256()[1]
    return [(p, first, os.path.getsize(p)) for p, first, _ in chunks], error, digest


@contextmanager
def atomic_write(path: str | Path, mode: str = "wb") -> Iterator[BinaryIO]:
    """Write to ``path`` through a temporary file renamed into place on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, mode) as f:
        yield f  # type: ignore[misc]
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_text_atomic(path: str | Path, text: str) -> None:
    with atomic_write(path, "wb") as f:
        f.write(text.encode("utf-8"))


def write_work_json(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` atomically, by orjson (a 70 MB plan of 200,000 files in
    0.1 s, against 1 s by ``json``); by ``json`` when orjson refuses it (a file name with bytes
    that are not UTF-8, held as lone surrogates; integers beyond 64 bits; keys that are not
    strings), with a leading space that tells :func:`read_work_json` to read it by ``json`` too
    (orjson would read an integer beyond 64 bits as a float). For the run's own files in OUT/work."""
    import orjson

    try:
        data = orjson.dumps(obj)
    except TypeError:
        data = b" " + json.dumps(obj).encode("utf-8")
    with atomic_write(path, "wb") as f:
        f.write(data)


def read_work_json(path: str | Path) -> Any:
    """The JSON value in ``path`` as :func:`write_work_json` wrote it (any JSON file: one that
    starts with whitespace is read by ``json``)."""
    import orjson

    data = Path(path).read_bytes()
    return json.loads(data) if data[:1].isspace() else orjson.loads(data)
