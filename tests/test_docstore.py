"""Documents between passes: frames and Parquet give back the same documents in the same batches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dataprep.docstore import DocWriter, read_docs
from dataprep.document import Document, meta_values


def _docs() -> list[Document]:
    out = []
    for i in range(2345):
        meta = {} if i % 3 == 0 else {"k": i, "nested": {"s": "中文", "f": 0.1 * i}}
        tokens = None if i % 5 == 0 else np.arange(i % 7, dtype=np.int32) + i
        out.append(Document(f"d{i}", f"文本 {i}\n" * (i % 4), f"src{i % 2}", meta, tokens))
    return out


def _write(path: Path, docs: list[Document], sizes: list[int]) -> None:
    w = DocWriter(path)
    start = 0
    for n in sizes:
        w.write(docs[start : start + n])
        start += n
    w.close()
    assert w.docs == start == len(docs)


def _same(a: Document, b: Document) -> bool:
    if (a.id, a.text, a.source, a.meta) != (b.id, b.text, b.source, b.meta):
        return False
    if a.tokens is None or b.tokens is None:
        return a.tokens is None and b.tokens is None
    return np.asarray(b.tokens).dtype == np.int32 and np.array_equal(a.tokens, b.tokens)


@pytest.mark.parametrize("suffix", [".frames", ".parquet"])
def test_round_trip_in_batches_of_exactly_batch_size(tmp_path: Path, suffix: str) -> None:
    docs = _docs()
    path = tmp_path / f"t{suffix}"
    _write(path, docs, [1000, 998, 3, 344])  # written in uneven batches, as after drops
    batches = list(read_docs(path, 1000))
    assert [len(b) for b in batches] == [1000, 1000, 345]
    back = [d for b in batches for d in b]
    assert all(_same(a, b) for a, b in zip(docs, back, strict=True))


def test_frames_and_parquet_agree_and_untouched_metadata_passes_through(tmp_path: Path) -> None:
    docs = _docs()
    _write(tmp_path / "a.frames", docs, [700, 700, 945])
    _write(tmp_path / "a.parquet", docs, [1000, 1000, 345])
    for size in (1, 7, 1000):
        frames = list(read_docs(tmp_path / "a.frames", size))
        parquet = list(read_docs(tmp_path / "a.parquet", size))
        assert [len(b) for b in frames] == [len(b) for b in parquet]
        flat = [d for b in frames for d in b]
        assert all(_same(a, b) for a, b in zip(flat, (d for b in parquet for d in b), strict=True))
    # metadata no stage touched is handed back as the stored JSON text; a touched one is re-encoded
    again = [d for b in read_docs(tmp_path / "a.frames", 1000) for d in b]
    stored = again[1].meta_json()
    assert stored == docs[1].meta_json()
    again[1].meta["added"] = True
    assert again[1].meta_json() != stored and '"added": true' in again[1].meta_json()
    again[2].meta = {}
    assert again[2].meta_json() == ""


def test_document_keeps_its_dataclass_behaviour() -> None:
    a = Document("x", "t")
    assert a.meta == {} and a.source == "" and a.tokens is None
    a.meta["k"] = 1
    assert Document("x", "t").meta == {}  # no shared default
    assert a == Document("x", "t", meta={"k": 1}) and a != Document("x", "t")
    assert "meta={'k': 1}" in repr(a)
    with pytest.raises(TypeError):
        hash(a)
    with pytest.raises(AttributeError):
        a.other = 1  # type: ignore[attr-defined]


def test_meta_get_decodes_only_when_the_key_may_be_there(tmp_path: Path) -> None:
    docs = [Document("a", "t", meta={"tokenize": {"cuts": [1, 2]}}), Document("b", "t", meta={"x": 1})]
    _write(tmp_path / "m.frames", docs, [2])
    a, b = next(iter(read_docs(tmp_path / "m.frames", 10)))
    assert b.meta_get("tokenize", {}) == {} and b._meta is None  # not decoded
    assert a.meta_get("tokenize", {}) == {"cuts": [1, 2]}
    assert Document("c", "t").meta_get("k", 5) == 5


def test_meta_values_equal_meta_get_and_decode_nothing_for_keeps(tmp_path: Path) -> None:
    docs = [
        Document("a", "t", meta={"script": "Hans", "x": [1]}),
        Document("b", "t", meta={"x": {"script": "nested"}}),
        Document("c", "t"),
        Document("d", "t", meta={"script": "Hant"}),
    ]
    _write(tmp_path / "m.frames", docs, [4])
    read = next(iter(read_docs(tmp_path / "m.frames", 10)))
    read[3].meta["script"] = "Latn"  # decoded and changed: its own metadata counts
    mixed = [*read, Document("e", "t", meta={"script": "Kore"})]
    assert meta_values(mixed, "script", "?") == ["Hans", "?", "?", "Latn", "Kore"]
    assert read[0]._meta is None and read[1]._meta is None  # nothing decoded was kept
    assert meta_values(mixed, "script", "?") == [d.meta_get("script", "?") for d in mixed]
    assert meta_values([], "script") == []
