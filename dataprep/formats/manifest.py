"""Reading OUT/manifest.json and locating the shard files it lists.

Top level: format_version, dataprep_version, recipe {name, hash, file}, seed, inputs [{path,
bytes, sha256}], documents {read, kept, dropped, files [{path, rows, bytes, sha256}] when
OUT/documents is written}, tokenizer {file, kind, sha256, size, vocab_size,
eos/bos/pad/unk token and id, roundtrip}, shards (written by the packing stage):

    "shards": {
      "seq_length": 512,             # tokens per training sample; rows hold seq_length + 1
      "row_length": 513,
      "dtype": "uint16",             # of the .bin files (MindRecord is always int32)
      "packing": "concat",           # concat | pad | bestfit
      "columns": ["input_ids", "actual_seq_len"],   # + "loss_mask" for pad / bestfit
      "vocab_size": 8192, "eos_id": 2, "pad_id": 0, "bos_id": 1,
      "shuffle": {"seed": 0, "buckets": 1},
      "splits": {"train": {"rows": R, "tokens": T, "documents": D, "doc_tokens": N,
                           "eos_tokens": E, "padding_tokens": P,
                           "dropped": {"tail_tokens": .., "truncated_tokens": .., "eos": ..},
                           "equal_files": {"files": 8, "rows": r},   # train, pack.equal_shards
                           "files": [{"path": "shards/bin/train-00000.bin", "format": "bin",
                                      "rows": r, "tokens": t, "bytes": b, "sha256": "...",
                                      "index": {"path": "shards/bin/train-00000.idx", "sha256": ...}},
                                     ...,
                                     {"path": "shards/bin/train-remainder.bin", "remainder": true,
                                      "rows": r2, ...},   # the rows left over, r2 < 8
                                     {"path": "shards/megatron/train_text_document.bin",
                                      "format": "megatron", "documents": E, "tokens": ..,
                                      "index": {...}}]},   # writers: [..., megatron]
                 "validation": {...}},
      "totals": {"rows": .., "tokens": .., "documents": ..}
    }

Token accounting per split (checked when writing and by ``dataprep verify``):
tokens = doc_tokens + documents (one EOS each) - dropped tokens (tail, truncated);
eos_tokens = documents - dropped.eos; rows * row_length = tokens + padding_tokens.

Typed, the manifest is :class:`Manifest` (its ``shards``: :class:`ShardsManifest`, with a
:class:`SplitEntry` per split and a :class:`FileEntry` per file). ``to_json`` writes the same keys
in the same order as the dict literals did, so the bytes of manifest.json do not depend on going
through the dataclasses; ``from_json`` reads what ``to_json`` writes (and the smaller manifests
of hand-made shards: per-file counts, indexes and accounting are optional there).
``SCHEMA_VERSION`` is the manifest's ``format_version``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1


@dataclass
class IndexEntry:
    """A data file's companion (a .bin's .idx, a .mindrecord's .db)."""

    path: str
    bytes: int | None = None
    sha256: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path}
        if self.bytes is not None:
            out["bytes"] = self.bytes
        if self.sha256 is not None:
            out["sha256"] = self.sha256
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> IndexEntry:
        return cls(d["path"], d.get("bytes"), d.get("sha256"))


@dataclass
class FileEntry:
    """One shard file: ``path`` relative to OUT, its ``format`` (a registered shard format), its
    split, rows, real tokens, size and sha256, its companion ``index``; ``remainder``: the split's
    remainder file (listed last); ``documents``: the sequences of a format of whole documents
    (``megatron``: no rows, one sequence per kept document)."""

    path: str
    format: str
    split: str | None = None
    rows: int | None = None
    tokens: int | None = None
    bytes: int | None = None
    sha256: str | None = None
    index: IndexEntry | None = None
    remainder: bool = False
    source_ids: IndexEntry | None = None  # a format keeping them beside the data (bin's .src)
    documents: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "format": self.format}
        for name in ("split", "rows", "documents", "tokens", "bytes", "sha256"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.index is not None:
            out["index"] = self.index.to_json()
        if self.source_ids is not None:
            out["source_ids"] = self.source_ids.to_json()
        if self.remainder:
            out["remainder"] = True
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FileEntry:
        index = d.get("index")
        return cls(
            path=d["path"],
            format=d.get("format", ""),
            split=d.get("split"),
            rows=d.get("rows"),
            tokens=d.get("tokens"),
            bytes=d.get("bytes"),
            sha256=d.get("sha256"),
            index=IndexEntry.from_json(index) if index else None,
            remainder=bool(d.get("remainder", False)),
            source_ids=IndexEntry.from_json(d["source_ids"]) if d.get("source_ids") else None,
            documents=d.get("documents"),
        )


@dataclass
class Dropped:
    """Tokens and EOS a split lost in packing."""

    tail_tokens: int = 0
    truncated_tokens: int = 0
    eos: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"tail_tokens": self.tail_tokens, "truncated_tokens": self.truncated_tokens, "eos": self.eos}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Dropped:
        return cls(d.get("tail_tokens", 0), d.get("truncated_tokens", 0), d.get("eos", 0))


@dataclass
class SplitEntry:
    """One split: rows and the exact token accounting, how packing went (``packing``: counters
    against concat), its files in order (every format's), and for equal train files their count
    and rows (``equal_files``)."""

    rows: int
    tokens: int = 0
    documents: int = 0
    doc_tokens: int = 0
    eos_tokens: int = 0
    padding_tokens: int = 0
    segments: int | None = None
    dropped: Dropped = field(default_factory=Dropped)
    packing: dict[str, Any] | None = None
    files: list[FileEntry] = field(default_factory=list)
    equal_files: dict[str, int] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rows": self.rows,
            "tokens": self.tokens,
            "documents": self.documents,
            "doc_tokens": self.doc_tokens,
            "eos_tokens": self.eos_tokens,
            "padding_tokens": self.padding_tokens,
        }
        if self.segments is not None:
            out["segments"] = self.segments
        out["dropped"] = self.dropped.to_json()
        if self.packing is not None:
            out["packing"] = self.packing
        out["files"] = [f.to_json() for f in self.files]
        if self.equal_files is not None:
            out["equal_files"] = self.equal_files
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SplitEntry:
        return cls(
            rows=int(d.get("rows", 0)),
            tokens=d.get("tokens", 0),
            documents=d.get("documents", 0),
            doc_tokens=d.get("doc_tokens", 0),
            eos_tokens=d.get("eos_tokens", 0),
            padding_tokens=d.get("padding_tokens", 0),
            segments=d.get("segments"),
            dropped=Dropped.from_json(d.get("dropped", {})),
            packing=d.get("packing"),
            files=[FileEntry.from_json(f) for f in d.get("files", [])],
            equal_files=d.get("equal_files"),
        )

    def files_of(self, fmt: str) -> list[FileEntry]:
        """This split's files in format ``fmt``, in order."""
        return [f for f in self.files if f.format == fmt]

    def formats(self) -> list[str]:
        """The formats of this split's files, in the order first found."""
        return list(dict.fromkeys(f.format for f in self.files))


@dataclass
class ShardsManifest:
    """The manifest's ``shards``: row layout, ids, packing, shuffle, formats and the splits."""

    seq_length: int | None
    row_length: int
    dtype: str
    packing: str = "concat"
    columns: list[str] = field(default_factory=lambda: ["input_ids", "actual_seq_len"])
    vocab_size: int | None = None
    eos_id: int | None = None
    pad_id: int | None = None
    bos_id: int | None = None
    shuffle: dict[str, Any] | None = None
    formats: list[str] | None = None
    splits: dict[str, SplitEntry] = field(default_factory=dict)
    totals: dict[str, int] | None = None
    sources: list[str] | None = None  # source names by id (the source_id column), when mixed

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "seq_length": self.seq_length,
            "row_length": self.row_length,
            "dtype": self.dtype,
            "packing": self.packing,
            "columns": self.columns,
            "vocab_size": self.vocab_size,
            "eos_id": self.eos_id,
            "pad_id": self.pad_id,
            "bos_id": self.bos_id,
        }
        if self.shuffle is not None:
            out["shuffle"] = self.shuffle
        if self.formats is not None:
            out["formats"] = self.formats
        if self.sources is not None:
            out["sources"] = self.sources
        out["splits"] = {name: s.to_json() for name, s in self.splits.items()}
        if self.totals is not None:
            out["totals"] = self.totals
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ShardsManifest:
        return cls(
            seq_length=d.get("seq_length"),
            row_length=int(d["row_length"]),
            dtype=d.get("dtype", "int32"),
            packing=d.get("packing", "concat"),
            columns=list(d.get("columns", ["input_ids", "actual_seq_len"])),
            vocab_size=d.get("vocab_size"),
            eos_id=d.get("eos_id"),
            pad_id=d.get("pad_id"),
            bos_id=d.get("bos_id"),
            shuffle=d.get("shuffle"),
            formats=d.get("formats"),
            splits={name: SplitEntry.from_json(s) for name, s in (d.get("splits") or {}).items()},
            totals=d.get("totals"),
            sources=d.get("sources"),
        )


@dataclass
class SourceMix:
    """One source of the manifest's ``mix`` block (train split; tokens count each document's EOS):
    documents and tokens ``available`` (what reached the mix, after cleaning and dedup: tokens
    are counted there, the tokenizer runs after cleaning), ``kept`` (documents chosen at least
    once, their tokens once),
    ``written`` (copies in the train stream), ``target_share``, ``achieved_share`` (of the
    tokens written), ``epochs`` (written / available tokens), ``short_tokens`` (tokens the source
    lacked to meet its share), ``unplaced_copies`` (copies left out to keep two copies of a
    document out of one row) and ``rows`` (train rows whose source_id it is)."""

    source_id: int
    target_share: float
    achieved_share: float
    epochs: float
    max_epochs: float
    priority: int
    docs_available: int
    tokens_available: int
    docs_kept: int
    tokens_kept: int
    docs_written: int
    tokens_written: int
    short_tokens: int = 0
    unplaced_copies: int = 0
    rows: int = 0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SourceMix:
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d})


@dataclass
class MixManifest:
    """The manifest's ``mix``: per source name, :class:`SourceMix`; the run's ``total_tokens``
    planned, ``policy`` and ``tolerance``; ``met``: every achieved share within the tolerance of
    its target; ``short``: the names of the sources that ran short."""

    sources: dict[str, SourceMix]
    total_tokens: int
    policy: str
    tolerance: float
    met: bool
    short: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "sources": {k: v.to_json() for k, v in self.sources.items()},
            "total_tokens": self.total_tokens,
            "policy": self.policy,
            "tolerance": self.tolerance,
            "met": self.met,
            "short": self.short,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> MixManifest:
        return cls(
            sources={k: SourceMix.from_json(v) for k, v in d["sources"].items()},
            total_tokens=d["total_tokens"],
            policy=d["policy"],
            tolerance=d["tolerance"],
            met=d["met"],
            short=list(d.get("short", [])),
        )


@dataclass
class Manifest:
    """manifest.json. The run's identity (``dataprep_version``, ``recipe``: name, hash, file;
        ``seed``; ``inputs``: path, bytes, sha256 each), the documents read / kept / dropped (and
    ``files``: the Parquet files of OUT/documents with rows, bytes and sha256, when written), then
        what the global stages' decides returned (``parts``, in order: e.g. ``minhash_dedup``,
        ``tokenizer``, ``shards``; ``shards`` is typed, see :attr:`shards`)."""

    dataprep_version: str
    recipe: dict[str, Any]
    seed: int
    inputs: list[dict[str, Any]]
    documents: dict[str, Any]
    parts: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    @property
    def shards(self) -> ShardsManifest | None:
        shards = self.parts.get("shards")
        if shards is None or isinstance(shards, ShardsManifest):
            return shards
        return ShardsManifest.from_json(shards)

    @property
    def tokenizer(self) -> dict[str, Any] | None:
        return self.parts.get("tokenizer")

    @property
    def mix(self) -> MixManifest | None:
        mix = self.parts.get("mix")
        if mix is None or isinstance(mix, MixManifest):
            return mix
        return MixManifest.from_json(mix)

    def split_files(self, out: Path, split: str, fmt: str) -> list[FileEntry]:
        """The files of ``split`` in format ``fmt``, in order (``out``: the run's directory, for
        messages); ValueError without shards or without that split."""
        shards = self.shards
        if shards is None:
            raise ValueError(
                f"{out}/manifest.json has no 'shards' section (did the recipe end with a packing stage?)"
            )
        entry = shards.splits.get(split)
        if entry is None:
            raise ValueError(f"{out}/manifest.json has no split {split!r}")
        return entry.files_of(fmt)

    def add(self, part: dict[str, Any]) -> None:
        """Merge a decide's manifest entries (a key seen before keeps its place)."""
        self.parts.update(part)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format_version": self.schema_version,
            "dataprep_version": self.dataprep_version,
            "recipe": self.recipe,
            "seed": self.seed,
            "inputs": self.inputs,
            "documents": self.documents,
        }
        for key, value in self.parts.items():
            out[key] = value.to_json() if isinstance(value, ShardsManifest | MixManifest) else value
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Manifest:
        head = ("format_version", "dataprep_version", "recipe", "seed", "inputs", "documents")
        return cls(
            dataprep_version=d.get("dataprep_version", ""),
            recipe=d.get("recipe", {}),
            seed=d.get("seed", 0),
            inputs=d.get("inputs", []),
            documents=d.get("documents", {}),
            parts={k: v for k, v in d.items() if k not in head},
            schema_version=d.get("format_version", SCHEMA_VERSION),
        )


def manifest_text(doc: dict[str, Any]) -> str:
    """manifest.json's text: exactly ``json.dumps(doc, ensure_ascii=False, indent=1)``, its
    ``inputs`` list (one record per input file) written by orjson, which writes a record of
    strings, integers and None as json does: 200,000 inputs in 0.1 s instead of 1 s (json
    indents in Python). By json alone when a record holds anything else, or a file name that is
    not UTF-8 (lone surrogates, refused by orjson)."""
    inputs = doc.get("inputs")
    flat = (str, int, type(None))
    if not inputs or not all(type(v) in flat for record in inputs for v in record.values()):
        return json.dumps(doc, ensure_ascii=False, indent=1)
    import orjson

    try:
        listed = orjson.dumps(inputs, option=orjson.OPT_INDENT_2).decode()
    except TypeError:
        return json.dumps(doc, ensure_ascii=False, indent=1)
    # from two spaces a level at the top to one space a level, one level down: records' fields
    # (4 spaces) get 3, records (2) keep 2, the closing bracket gets 1
    listed = listed.replace("\n    ", "\n   ").replace("\n]", "\n ]")
    head = json.dumps({**doc, "inputs": []}, ensure_ascii=False, indent=1)
    return head.replace('\n "inputs": []', '\n "inputs": ' + listed, 1)


def find_manifest(path: str | Path) -> Path:
    """manifest.json of an output directory, or of the directory a shard file sits in (or above)."""
    p = Path(path).resolve()
    for d in [p, *list(p.parents)[:4]]:
        candidate = d / "manifest.json" if d.is_dir() else d.parent / "manifest.json"
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"no manifest.json found for {path} (expected OUT/manifest.json of a dataprep run)"
    )


def read_manifest(path: str | Path) -> tuple[Path, Manifest]:
    """(output directory, manifest) for an output directory or any file inside it."""
    m = find_manifest(path)
    return m.parent, Manifest.from_json(json.loads(m.read_text(encoding="utf-8")))
