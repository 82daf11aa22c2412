"""``dataprep inspect shard PATH``: decoded rows with document boundaries visible, plus shard stats.

PATH is a .bin (or its .idx), a .mindrecord (or its .db), a Megatron ``<split>_text_document.bin``
(or its .idx), or a run's output directory (then the first file of the split in the chosen
format). Metadata and the tokenizer come from the run's
manifest.json; a lone .bin/.idx pair without one is read from its index (dtype, row length) and
shown as ids unless ``--tokenizer`` is given.

In the text, every document piece of a row is shown on its own, ``⟨EOS⟩`` marks the end of a
document, ``⟨…⟩`` a piece that continues in another row (or was cut), ``⟨PAD×n⟩`` the padding.
A format of whole documents (``megatron``) has no rows: its sequences are shown instead
(``--rows N``: the first N, ``--row K``: sequence K), each one document ending with ``⟨EOS⟩``.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from dataprep.formats.manifest import Manifest, read_manifest
from dataprep.formats.registry import FileMeta, ShardFormat, format_of_file, get_format

EOS_MARK = "⟨EOS⟩"
CONT_MARK = "⟨…⟩"


def _locate(
    path: Path, split: str, fmt: str | None
) -> tuple[Path, ShardFormat, Path | None, Manifest | None]:
    """(data file, its format, output dir or None, manifest or None)."""
    out: Path | None = None
    manifest: Manifest | None = None
    with contextlib.suppress(FileNotFoundError):
        out, manifest = read_manifest(path)
    if path.is_dir():
        if manifest is None or out is None:
            raise FileNotFoundError(f"{path} holds no manifest.json: give a shard file instead")
        shards = manifest.shards
        if shards is None:
            raise ValueError(f"{out}/manifest.json has no 'shards' section")
        entry = shards.splits.get(split)
        files = entry.files if entry is not None else []
        if path.resolve() != out.resolve():  # a directory inside OUT, e.g. shards/mindrecord/validation/
            # its files, of the asked split when it holds some, else of the first split that does
            order = sorted(shards.splits.items(), key=lambda item: item[0] != split)
            inside = [
                [f for f in e.files if (out / f.path).resolve().is_relative_to(path.resolve())]
                for _, e in order
            ]
            files = next((group for group in inside if group), [])
            if not files:
                raise ValueError(f"{out}/manifest.json lists no shard file inside {path}")
        if not files:
            raise ValueError(f"{out}/manifest.json lists no files for split {split!r}")
        formats = [f.format for f in files]
        light = [name for name in dict.fromkeys(formats) if get_format(name).light]
        want = fmt or (light[0] if light else formats[0])
        found = next((f for f in files if f.format == want), None)
        if found is None:
            raise ValueError(
                f"split {split!r} has no {want} files (formats: {', '.join(sorted(set(formats)))})"
            )
        return out / found.path, get_format(want), out, manifest
    try:
        shard_format, data = format_of_file(path)
    except ValueError:
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist") from None
        raise
    if not data.is_file():
        raise FileNotFoundError(f"{data} does not exist")
    return data, shard_format, out, manifest


def _meta(path: Path, shard_format: ShardFormat, manifest: Manifest | None) -> dict[str, Any]:
    shards = manifest.shards if manifest is not None else None
    if shards is not None:
        return {
            "row_length": shards.row_length,
            "dtype": shards.dtype,
            "eos_id": shards.eos_id,
            "pad_id": shards.pad_id,
            "vocab_size": shards.vocab_size,
            "packing": shards.packing,
        }
    if shard_format.standalone_meta is None:
        raise FileNotFoundError(
            f"{path}: no manifest.json found; a {shard_format.title} shard needs its run's manifest"
        )
    meta = shard_format.standalone_meta(path)
    return {
        "row_length": meta.row_length,
        "dtype": meta.dtype,
        "eos_id": None,
        "pad_id": None,
        "vocab_size": None,
    }


def _segments(row: np.ndarray, bounds: np.ndarray, eos: int | None, decode: Any) -> list[dict[str, Any]]:
    segs = []
    start = 0
    for end in (int(b) for b in bounds):
        ids = row[start:end]
        ends_with_eos = eos is not None and len(ids) > 0 and int(ids[-1]) == eos
        body = ids[:-1] if ends_with_eos else ids
        seg: dict[str, Any] = {"start": start, "end": end, "eos": ends_with_eos}
        if decode is not None:
            seg["text"] = decode(body)
        else:
            seg["ids"] = [int(i) for i in ids]
        segs.append(seg)
        start = end
    return segs


def _show_row(
    index: int, row: np.ndarray, bounds: np.ndarray, meta: dict[str, Any], decode: Any
) -> dict[str, Any]:
    real = int(bounds[-1]) if len(bounds) else 0
    return {
        "row": index,
        "real_tokens": real,
        "padding": meta["row_length"] - real,
        "actual_seq_len": [int(b) for b in bounds],
        "segments": _segments(row, bounds, meta["eos_id"], decode),
    }


def _print_row(r: dict[str, Any]) -> None:
    print(
        f"── row {r['row']} · {r['real_tokens']} real tokens · {len(r['segments'])} piece(s) · "
        f"actual_seq_len {r['actual_seq_len']}"
    )
    for k, seg in enumerate(r["segments"]):
        body = seg["text"] if "text" in seg else " ".join(map(str, seg["ids"]))
        mark = EOS_MARK if seg["eos"] else CONT_MARK
        print(f"  [{k}] tokens {seg['start']}..{seg['end']}: {body}{mark}")
    if r["padding"]:
        print(f"  ⟨PAD×{r['padding']}⟩")


def inspect_shard(
    path: str | Path,
    rows: int = 3,
    row: int | None = None,
    as_json: bool = False,
    split: str = "train",
    fmt: str | None = None,
    tokenizer: str | None = None,
) -> int:
    """Print rows and per-shard stats; returns an exit code."""
    data, shard_format, out, manifest = _locate(Path(path), split, fmt)
    decode = None
    tok_path = tokenizer or (
        str(out / manifest.tokenizer["file"]) if out and manifest and manifest.tokenizer else None
    )
    if tok_path and Path(tok_path).exists():
        from dataprep.tokenizers.load import load_tokenizer

        decode = load_tokenizer(tok_path).decode
    if shard_format.takes == "documents":
        return _inspect_documents(data, shard_format, manifest, rows, row, as_json, decode)
    meta = _meta(data, shard_format, manifest)
    L = meta["row_length"]
    stats = {"rows": 0, "real_tokens": 0, "padding_tokens": 0, "eos": 0, "pieces": 0}
    pieces_min, pieces_max = None, 0
    id_min, id_max = None, None
    shown: list[dict[str, Any]] = []
    base = 0
    file_meta = FileMeta(meta["row_length"], meta["dtype"])
    for batch, _ in shard_format.read_file(data, None, file_meta):
        real = batch.real_tokens
        mask = np.arange(L)[None, :] < real[:, None]
        stats["rows"] += len(batch)
        stats["real_tokens"] += int(real.sum())
        stats["padding_tokens"] += int(len(batch) * L - real.sum())
        stats["pieces"] += len(batch.seg_ends)
        if meta["eos_id"] is not None:
            stats["eos"] += int(((batch.tokens == meta["eos_id"]) & mask).sum())
        if len(batch):
            pieces_min = min(int(batch.seg_counts.min()), pieces_min or 1 << 30)
            pieces_max = max(int(batch.seg_counts.max()), pieces_max)
            lo, hi = int(batch.tokens[mask].min()), int(batch.tokens[mask].max())
            id_min = lo if id_min is None else min(id_min, lo)
            id_max = hi if id_max is None else max(id_max, hi)
        wanted = [row] if row is not None else list(range(rows))
        for i in wanted:
            if base <= i < base + len(batch):
                shown.append(_show_row(i, batch.tokens[i - base], batch.boundaries(i - base), meta, decode))
        base += len(batch)
    if row is not None and not shown:
        raise ValueError(f"row {row} out of range: {data} holds {stats['rows']} rows")
    total = stats["rows"] * L
    summary = {
        "file": str(data),
        "format": shard_format.name,
        "row_length": L,
        "dtype": shard_format.stored_dtype(meta["dtype"]),
        **stats,
        "padding_fraction": round(stats["padding_tokens"] / total, 6) if total else 0.0,
        "pieces_per_row": {
            "mean": round(stats["pieces"] / stats["rows"], 3) if stats["rows"] else 0.0,
            "min": pieces_min or 0,
            "max": pieces_max,
        },
        "id_range": [id_min, id_max],
        "decoded": decode is not None,
    }
    if as_json:
        json.dump({"shard": summary, "rows": shown}, sys.stdout, ensure_ascii=False, indent=1)
        print()
        return 0
    print(f"{data}  ({shard_format.name}, {summary['dtype']}, row_length {L})")
    ppr = summary["pieces_per_row"]
    print(
        f"rows {stats['rows']:,} · real tokens {stats['real_tokens']:,} · padding "
        f"{100 * summary['padding_fraction']:.2f}% · EOS {stats['eos']:,} · "
        f"documents (pieces) per row {ppr['mean']} (min {ppr['min']}, max {ppr['max']}) · "
        f"ids {id_min}..{id_max}"
    )
    if decode is None:
        print("(no tokenizer found: showing ids; pass --tokenizer to decode)")
    for r in shown:
        _print_row(r)
    return 0


def _inspect_documents(
    data: Path,
    shard_format: ShardFormat,
    manifest: Manifest | None,
    rows: int,
    row: int | None,
    as_json: bool,
    decode: Any,
) -> int:
    """A file of whole documents (``megatron``): its sequences (``rows`` first ones, or sequence
    ``row``) decoded, each ending with ``⟨EOS⟩`` (or ``⟨…⟩`` if it does not), and its stats."""
    read, standalone = shard_format.read_sequences, shard_format.standalone_meta
    assert read is not None and standalone is not None
    shards = manifest.shards if manifest is not None else None
    eos = shards.eos_id if shards is not None else None
    dtype = standalone(data).dtype
    stats = {"sequences": 0, "tokens": 0, "eos": 0, "ending_with_eos": 0}
    size_min, size_max = None, 0
    id_min, id_max = None, None
    shown: list[dict[str, Any]] = []
    wanted = {row} if row is not None else set(range(rows))
    for tokens, sizes in read(data, None):
        ends = np.cumsum(sizes)
        base = stats["sequences"]
        stats["sequences"] += len(sizes)
        stats["tokens"] += len(tokens)
        size_min = min(int(sizes.min()), size_min if size_min is not None else 1 << 62)
        size_max = max(int(sizes.max()), size_max)
        id_min = min(int(tokens.min()), id_min if id_min is not None else 1 << 62)
        id_max = max(int(tokens.max()), id_max if id_max is not None else -1)
        if eos is not None:
            stats["eos"] += int((tokens == eos).sum())
            stats["ending_with_eos"] += int((tokens[ends - 1] == eos).sum())
        for i in sorted(k for k in wanted if base <= k < stats["sequences"]):
            end = int(ends[i - base])
            ids = tokens[end - int(sizes[i - base]) : end]
            seg = _segments(ids, np.asarray([len(ids)]), eos, decode)[0]
            shown.append(
                {"sequence": i, "tokens": len(ids), **{k: v for k, v in seg.items() if k != "start"}}
            )
    if row is not None and not shown:
        raise ValueError(f"sequence {row} out of range: {data} holds {stats['sequences']} sequences")
    summary = {
        "file": str(data),
        "format": shard_format.name,
        "dtype": dtype,
        **stats,
        "tokens_per_sequence": {
            "mean": round(stats["tokens"] / stats["sequences"], 3) if stats["sequences"] else 0.0,
            "min": size_min or 0,
            "max": size_max,
        },
        "id_range": [id_min, id_max],
        "decoded": decode is not None,
    }
    if as_json:
        json.dump({"shard": summary, "sequences": shown}, sys.stdout, ensure_ascii=False, indent=1)
        print()
        return 0
    tps = summary["tokens_per_sequence"]
    print(f"{data}  ({shard_format.name}, {dtype}, one sequence per document)")
    ending = f" · ending with EOS {stats['ending_with_eos']:,}" if eos is not None else ""
    print(
        f"sequences {stats['sequences']:,} · tokens {stats['tokens']:,} · EOS {stats['eos']:,}{ending} · "
        f"tokens per sequence {tps['mean']} (min {tps['min']}, max {tps['max']}) · ids {id_min}..{id_max}"
    )
    if decode is None:
        print("(no tokenizer found: showing ids; pass --tokenizer to decode)")
    for r in shown:
        body = r["text"] if "text" in r else " ".join(map(str, r["ids"]))
        print(f"── sequence {r['sequence']} · {r['tokens']} tokens")
        print(f"  {body}{EOS_MARK if r['eos'] else CONT_MARK}")
    return 0
