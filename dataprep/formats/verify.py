"""``dataprep verify DIR``: prove that a run's shards are what its manifest says.

Checks: every listed file (shards, their .idx / .db, the tokenizer) exists with the recorded size
and sha256; equal files hold equal rows and a remainder file fewer rows than there are of them;
every row is well formed (ids in [0, vocab_size), boundaries increasing and within
the row, padding = pad_id); per file and per split the rows, tokens and EOS counted in the data
equal the manifest; the manifest's token accounting adds up (tokens = Σ document tokens +
documents - dropped; EOS = documents - dropped EOS; rows * row_length = tokens + padding); the
documents kept are the EOS in the shards (and the rows of OUT/documents, when written, whose
files are checked like the shards'); and the MindRecord and .bin files carry the same rows
(input_ids, actual_seq_len, loss_mask) in the same order. A format of whole documents
(``megatron``) is checked on its own terms: its layout, one EOS ending each sequence, one
sequence per kept document of the split, its tokens. Every problem is reported with the file and
the number that differs.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.formats.manifest import (
    FileEntry,
    IndexEntry,
    MixManifest,
    ShardsManifest,
    SplitEntry,
    read_manifest,
)
from dataprep.formats.registry import FileMeta, get_format
from dataprep.formats.rows import RowBatch, raw
from dataprep.io import file_sha256

MAX_REPORTED = 50


class Problems:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, msg: str) -> None:
        self.items.append(msg)

    def __bool__(self) -> bool:
        return bool(self.items)


def _check_file(out: Path, entry: FileEntry | IndexEntry, problems: Problems) -> bool:
    """Existence, size and checksum of a listed file; True when it is intact."""
    path = out / entry.path
    if not path.is_file():
        problems.add(f"{entry.path}: missing")
        return False
    ok = True
    if entry.bytes is not None and path.stat().st_size != entry.bytes:
        problems.add(f"{entry.path}: {path.stat().st_size} bytes, manifest says {entry.bytes}")
        ok = False
    if file_sha256(path) != entry.sha256:
        problems.add(f"{entry.path}: sha256 differs from the manifest (the file was changed or corrupted)")
        ok = False
    return ok


def _row_checks(where: str, batch: RowBatch, shards: ShardsManifest, problems: Problems) -> dict[str, int]:
    L = shards.row_length
    eos, pad, vocab = shards.eos_id, shards.pad_id, shards.vocab_size
    tokens = batch.tokens
    if tokens.size and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab):
        problems.add(
            f"{where}: token ids outside [0, {vocab}) (min {int(tokens.min())}, max {int(tokens.max())})"
        )
    off = batch.offsets
    ends = batch.seg_ends.astype(np.int64)
    if (batch.seg_counts < 1).any():
        problems.add(f"{where}: a row without boundaries")
        return {"rows": len(batch), "tokens": 0, "eos": 0, "padding": 0}
    step = np.diff(ends)
    within = np.ones(len(step), dtype=bool)
    within[off[1:-1] - 1] = False  # steps across rows are not checked
    if (step[within] <= 0).any() or (ends < 1).any() or (ends > L).any():
        problems.add(f"{where}: actual_seq_len not strictly increasing within 1..{L}")
    real = batch.real_tokens
    mask = np.arange(L)[None, :] < real[:, None]
    if ((tokens != pad) & ~mask).any():
        problems.add(f"{where}: padding positions hold ids other than pad_id {pad}")
    return {
        "rows": len(batch),
        "tokens": int(real.sum()),
        "eos": int(((tokens == eos) & mask).sum()),
        "padding": int(len(batch) * L - real.sum()),
    }


def _stream(out: Path, entry: FileEntry, shards: ShardsManifest) -> Iterator[tuple[RowBatch, Any]]:
    """(rows, stored loss masks or None) of one listed file, read by its format's reader."""
    fmt = get_format(entry.format)
    index = out / entry.index.path if entry.index is not None else None
    yield from fmt.read_file(out / entry.path, index, FileMeta(shards.row_length, shards.dtype))


def _check_equal_files(
    split: str, fmt: str, equal: dict[str, int], entries: list[FileEntry], problems: Problems
) -> None:
    """The split's files in one format: ``equal["files"]`` files of ``equal["rows"]`` rows, then at
    most one remainder file (listed last) with fewer rows than there are equal files."""
    sizes = [e.rows for e in entries if not e.remainder]
    rest = [e for e in entries if e.remainder]
    if sizes != [equal["rows"]] * equal["files"]:
        problems.add(
            f"{split} ({fmt}): file rows {sizes}, expected {equal['files']} files of {equal['rows']}"
        )
    if rest and (len(rest) > 1 or entries[-1] is not rest[0] or not 0 < (rest[0].rows or 0) < equal["files"]):
        problems.add(
            f"{split} ({fmt}): the remainder file must come last and hold 1..{equal['files'] - 1} rows "
            f"(found {[e.rows for e in rest]})"
        )


class StreamDigest:
    """Digests of a row stream that do not depend on how it was cut into batches."""

    def __init__(self) -> None:
        import hashlib

        self.rows = 0
        self.tokens = hashlib.sha256()
        self.bounds = hashlib.sha256()

    def update(self, batch: RowBatch) -> None:
        self.rows += len(batch)
        self.tokens.update(raw(batch.tokens, "<i4"))
        self.bounds.update(raw(batch.seg_counts, "<i4"))
        self.bounds.update(raw(batch.seg_ends, "<i4"))


def verify(path: str | Path, progress: bool = False) -> list[str]:
    """Problems found in the run at ``path`` (empty when everything checks out)."""
    problems = Problems()
    try:
        out, manifest = read_manifest(path)
        shards = manifest.shards
    except (FileNotFoundError, ValueError, KeyError) as e:
        return [str(e)]
    if not shards:
        return [f"{out}/manifest.json has no 'shards' section"]
    tok = manifest.tokenizer or {}
    if tok.get("file"):
        _check_file(out, IndexEntry(tok["file"], sha256=tok.get("sha256", "")), problems)
    if tok.get("size") and (shards.vocab_size or 0) < tok["size"]:
        problems.add(f"manifest: vocab_size {shards.vocab_size} < the tokenizer's {tok['size']} ids")
    L = shards.row_length
    if shards.seq_length is None or shards.seq_length + 1 != L:
        problems.add(f"manifest: row_length {L} != seq_length + 1")
    in_shards = 0  # documents whose EOS is in the shards: the kept ones
    for split, info in shards.splits.items():
        in_shards += info.eos_tokens
        _check_accounting(split, info, L, problems)
        by_format = {fmt: info.files_of(fmt) for fmt in info.formats() if get_format(fmt).takes == "rows"}
        for fmt in info.formats():
            if get_format(fmt).takes == "documents":
                for entry in info.files_of(fmt):
                    _check_documents(out, split, entry, info, shards, problems)
        if info.equal_files is not None:
            for fmt, entries in by_format.items():
                _check_equal_files(split, fmt, info.equal_files, entries, problems)
        streams: dict[str, StreamDigest] = {}
        for fmt, entries in by_format.items():
            digest = _check_format(out, split, fmt, entries, info, shards, problems)
            if digest is not None:
                streams[fmt] = digest
        _check_formats_agree(split, streams, problems)
        if progress:
            print(f"checked {split}: {info.rows} rows", file=sys.stderr)
    kept = manifest.documents.get("kept")
    mix = manifest.mix
    copies = 0  # a mixed run repeats documents: the EOS of every further copy
    if mix is not None:
        copies = sum(s.docs_written - s.docs_kept for s in mix.sources.values())
        _check_mix(mix, shards, problems)
    if kept is not None and kept + copies != in_shards:
        what = f" and {copies} further copies of mixed ones" if copies else ""
        problems.add(f"manifest: {kept} documents kept{what} but the shards hold {in_shards} (one EOS each)")
    _check_document_files(out, manifest.documents, problems)
    return problems.items


def _check_document_files(out: Path, documents: dict[str, Any], problems: Problems) -> None:
    """The Parquet files of OUT/documents (``output.documents``): intact, and as many rows as
    documents kept."""
    files = documents.get("files")
    if files is None:
        return
    import pyarrow.parquet as pq

    rows = 0
    for f in files:
        if _check_file(out, IndexEntry(f["path"], f.get("bytes"), f.get("sha256")), problems):
            n = pq.ParquetFile(out / f["path"]).metadata.num_rows
            if n != f.get("rows"):
                problems.add(f"{f['path']}: {n} documents in the file, manifest says {f.get('rows')}")
            rows += n
    if rows != documents.get("kept"):
        problems.add(f"documents/: {rows} documents, manifest says {documents.get('kept')} kept")


def _check_mix(mix: MixManifest, shards: ShardsManifest, problems: Problems) -> None:
    """A mixed run: the train split holds the tokens and documents the mix wrote, its rows by
    source add up, and every file's source ids (where a format keeps them apart) are intact and
    one per row."""
    train = shards.splits.get("train")
    if train is None:
        return
    tokens = sum(s.tokens_written for s in mix.sources.values())
    if train.doc_tokens + train.documents != tokens:
        problems.add(
            f"mix: the sources wrote {tokens} tokens but the train split holds "
            f"{train.doc_tokens + train.documents} (documents and their EOS)"
        )
    rows = sum(s.rows for s in mix.sources.values())
    if rows != train.rows:
        problems.add(f"mix: rows by source add up to {rows}, the train split has {train.rows}")
    if "source_id" not in shards.columns or not shards.sources:
        problems.add("mix: the shards have no source_id column or no source names")


def _check_source_ids(out: Path, entry: FileEntry, problems: Problems) -> bool:
    """A file's separate source ids (e.g. bin's .src): intact, one int32 per row."""
    if entry.source_ids is None:
        return True
    if not _check_file(out, entry.source_ids, problems):
        return False
    size = (out / entry.source_ids.path).stat().st_size
    if entry.rows is not None and size != 4 * entry.rows:
        problems.add(f"{entry.source_ids.path}: {size // 4} source ids for {entry.rows} rows")
        return False
    return True


def _check_accounting(split: str, info: SplitEntry, L: int, problems: Problems) -> None:
    """The split's token accounting adds up (tokens, EOS, rows against tokens and padding)."""
    d = info.dropped
    dropped_tokens = d.tail_tokens + d.truncated_tokens
    if info.tokens != info.doc_tokens + info.documents - dropped_tokens:
        problems.add(
            f"{split}: tokens {info.tokens} != doc_tokens {info.doc_tokens} + documents "
            f"{info.documents} - dropped {dropped_tokens}"
        )
    if info.eos_tokens != info.documents - d.eos:
        problems.add(
            f"{split}: eos_tokens {info.eos_tokens} != documents {info.documents} - dropped EOS {d.eos}"
        )
    if info.rows * L != info.tokens + info.padding_tokens:
        problems.add(
            f"{split}: rows * row_length {info.rows * L} != tokens {info.tokens} + padding "
            f"{info.padding_tokens}"
        )


def _check_format(
    out: Path,
    split: str,
    fmt: str,
    entries: list[FileEntry],
    info: SplitEntry,
    shards: ShardsManifest,
    problems: Problems,
) -> StreamDigest | None:
    """Every file of the split in one format: intact, rows well formed, counts as listed, totals as
    the split's; the digest of its row stream (None when a file is damaged: already reported,
    and comparing a partial stream says nothing)."""
    counted = {"rows": 0, "tokens": 0, "eos": 0, "padding": 0}
    digest = StreamDigest()
    intact_all = True
    for entry in entries:
        intact = _check_file(out, entry, problems)
        if entry.index is not None:
            intact = _check_file(out, entry.index, problems) and intact
        intact = _check_source_ids(out, entry, problems) and intact
        if not intact:
            intact_all = False
            continue
        file_counts = {"rows": 0, "tokens": 0, "eos": 0, "padding": 0}
        try:
            for batch, mask in _stream(out, entry, shards):
                c = _row_checks(entry.path, batch, shards, problems)
                for k in file_counts:
                    file_counts[k] += c[k]
                if mask is not None and not np.array_equal(mask, batch.loss_masks()):
                    problems.add(f"{entry.path}: loss_mask does not match the row padding")
                digest.update(batch)
        except (ValueError, RuntimeError, OSError) as e:
            problems.add(f"{entry.path}: unreadable: {e}")
            intact_all = False
            continue
        for key in ("rows", "tokens"):
            listed = getattr(entry, key)
            if listed is not None and file_counts[key] != listed:
                problems.add(f"{entry.path}: {file_counts[key]} {key} in the file, manifest says {listed}")
        for k in counted:
            counted[k] += file_counts[k]
    if not intact_all:
        return None
    for key, name in (
        ("rows", "rows"),
        ("tokens", "tokens"),
        ("eos", "eos_tokens"),
        ("padding", "padding_tokens"),
    ):
        if counted[key] != getattr(info, name):
            problems.add(
                f"{split} ({fmt}): {counted[key]} {name} in the files, manifest says {getattr(info, name)}"
            )
    return digest


def _check_documents(
    out: Path, split: str, entry: FileEntry, info: SplitEntry, shards: ShardsManifest, problems: Problems
) -> None:
    """A file of whole documents (e.g. ``megatron``): intact with its index, laid out as its format
    says (its ``read_sequences``), ids in [0, vocab_size), every sequence one document ending with
    its only EOS, as many as the split's kept documents, and its counts as listed. Its tokens are
    whole documents: they equal the split's doc_tokens + documents when packing dropped none."""
    intact = _check_file(out, entry, problems)
    if entry.index is not None:
        intact = _check_file(out, entry.index, problems) and intact
    if not intact:
        return
    read = get_format(entry.format).read_sequences
    assert read is not None
    eos, vocab = shards.eos_id, shards.vocab_size
    count = {"documents": 0, "tokens": 0, "eos": 0, "not_ending": 0}
    lo = hi = None
    try:
        for tokens, sizes in read(out / entry.path, out / entry.index.path if entry.index else None):
            ends = np.cumsum(sizes) - 1
            count["documents"] += len(sizes)
            count["tokens"] += len(tokens)
            count["eos"] += int((tokens == eos).sum())
            count["not_ending"] += int((tokens[ends] != eos).sum())
            if len(tokens):
                lo = min(int(tokens.min()), lo if lo is not None else 1 << 62)
                hi = max(int(tokens.max()), hi if hi is not None else -1)
    except (ValueError, OSError) as e:
        problems.add(f"{entry.path}: unreadable: {e}")
        return
    where = f"{entry.path}"
    if lo is not None and hi is not None and (lo < 0 or hi >= vocab):
        problems.add(f"{where}: token ids outside [0, {vocab}) (min {lo}, max {hi})")
    if count["not_ending"]:
        problems.add(f"{where}: {count['not_ending']} sequences do not end with EOS {eos}")
    if count["eos"] != count["documents"]:
        problems.add(f"{where}: {count['eos']} EOS in {count['documents']} sequences (one each expected)")
    for key in ("documents", "tokens"):
        listed = getattr(entry, key)
        if listed is not None and count[key] != listed:
            problems.add(f"{where}: {count[key]} {key} in the file, manifest says {listed}")
    kept = info.documents - info.dropped.eos
    if count["documents"] != kept:
        problems.add(f"{split} ({entry.format}): {count['documents']} documents, the split kept {kept}")
    whole = info.doc_tokens + info.documents
    nothing_dropped = info.dropped.eos == 0 and info.dropped.tail_tokens == 0
    if (nothing_dropped and count["tokens"] != whole) or count["tokens"] > whole:
        problems.add(
            f"{split} ({entry.format}): {count['tokens']} tokens, the split's documents and their EOS "
            f"hold {whole}"
        )


def _check_formats_agree(split: str, streams: dict[str, StreamDigest], problems: Problems) -> None:
    """Every format of the split carries the same row stream as the first one listed."""
    names = list(streams)
    for other in names[1:]:
        a, b = streams[names[0]], streams[other]
        what = [
            name
            for name, differs in (
                ("row count", a.rows != b.rows),
                ("input_ids", a.tokens.digest() != b.tokens.digest()),
                ("actual_seq_len", a.bounds.digest() != b.bounds.digest()),
            )
            if differs
        ]
        if what:
            first, second = get_format(names[0]).title, get_format(other).title
            problems.add(f"{split}: the {first} and {second} files differ in {', '.join(what)}")


def verify_command(path: str, quiet: bool = False) -> int:
    """Print the verdict; 0 when everything checks out, 1 otherwise."""
    found = verify(path, progress=not quiet)
    if not found:
        print(f"ok: {path} verified (checksums, row contents, totals, EOS accounting, formats agree)")
        return 0
    for msg in found[:MAX_REPORTED]:
        print(f"error: {msg}", file=sys.stderr)
    if len(found) > MAX_REPORTED:
        print(f"error: ... and {len(found) - MAX_REPORTED} more problems", file=sys.stderr)
    print(f"verify failed: {len(found)} problem(s) in {path}", file=sys.stderr)
    return 1
