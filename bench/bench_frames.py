"""Pass I/O of the frames between passes: Arrow IPC frames (checked against their sha256 before
they are parsed) against the pickle frames they replaced, on the same documents.

Usage: python bench/bench_frames.py [CORPUS_DIR] [--mb 40] [--repeat 3]

The documents are the text lines of CORPUS_DIR's files (default sample_corpus), repeated until
``--mb`` MB of text, in batches of 1000, every second document carrying tokens (as after a
tokenize stage). Each format is written once and read back once per round, rounds alternating;
the table gives the median CPU seconds of writing and of reading, and the ratio new / old.
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dataprep.docstore import DocWriter, read_docs
from dataprep.document import Document


def corpus_docs(root: Path, mb: int) -> list[Document]:
    lines = [
        line
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.suffix in (".txt", ".jsonl", ".md")
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines()
        if line.strip()
    ]
    docs: list[Document] = []
    total, i = 0, 0
    while total < mb * 1_000_000:
        text = lines[i % len(lines)]
        tokens = np.arange(len(text) // 2, dtype=np.int32) if i % 2 else None
        meta = {"n": i} if i % 3 else {}
        docs.append(Document(f"d{i}", text, "bench", meta, tokens))
        total += len(text.encode("utf-8"))
        i += 1
    return docs


def _batches(docs: list[Document], size: int = 1000) -> Iterator[list[Document]]:
    for k in range(0, len(docs), size):
        yield docs[k : k + size]


def write_pickle(path: Path, docs: list[Document]) -> None:
    """The frames format before Arrow: per batch an 8-byte length and a pickle of its columns."""
    with open(path, "wb") as f:
        for batch in _batches(docs):
            arrays = [None if d.tokens is None else np.asarray(d.tokens, dtype="<i4") for d in batch]
            lengths = [-1 if a is None else len(a) for a in arrays]
            present = [a for a in arrays if a is not None]
            tokens = np.concatenate(present).tobytes() if present else b""
            cols = ([d.id for d in batch], [d.text for d in batch], [d.source for d in batch])
            frame = pickle.dumps((*cols, [d.meta_json() for d in batch], lengths, tokens), protocol=5)
            f.write(len(frame).to_bytes(8, "little"))
            f.write(frame)


def read_pickle(path: Path) -> int:
    n = 0
    with open(path, "rb") as f:
        while head := f.read(8):
            ids, texts, sources, metas, lengths, tokens = pickle.loads(f.read(int.from_bytes(head, "little")))
            flat = np.frombuffer(tokens, dtype="<i4").astype(np.int32)
            ends = np.cumsum([max(k, 0) for k in lengths])
            for k, row in enumerate(zip(ids, texts, sources, metas, strict=True)):
                m = lengths[k]
                Document.stored(*row, None if m < 0 else flat[ends[k] - m : ends[k]])
                n += 1
    return n


def write_arrow(path: Path, docs: list[Document]) -> str:
    w = DocWriter(path)
    for batch in _batches(docs):
        w.write(batch)
    w.close()
    return w.sha256


def read_arrow(path: Path, sha256: str) -> int:
    return sum(len(b) for b in read_docs(path, 1000, sha256))


def cpu(fn, *args):  # type: ignore[no-untyped-def]
    t = time.process_time()
    result = fn(*args)
    return time.process_time() - t, result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus", nargs="?", default="sample_corpus")
    ap.add_argument("--mb", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    docs = corpus_docs(Path(args.corpus), args.mb)
    text_mb = sum(len(d.text.encode("utf-8")) for d in docs) / 1e6
    keys = ("pickle.write", "pickle.read", "arrow.write", "arrow.read")
    times: dict[str, list[float]] = {k: [] for k in keys}
    sizes = {}
    with tempfile.TemporaryDirectory() as tmp:
        old, new = Path(tmp) / "old.frames", Path(tmp) / "new.frames"
        for _ in range(args.repeat):
            t, _ = cpu(write_pickle, old, docs)
            times["pickle.write"].append(t)
            t, digest = cpu(write_arrow, new, docs)
            times["arrow.write"].append(t)
            t, n_old = cpu(read_pickle, old)
            times["pickle.read"].append(t)
            t, n_new = cpu(read_arrow, new, digest)
            times["arrow.read"].append(t)
            assert n_old == n_new == len(docs)
        sizes = {"pickle": os.path.getsize(old), "arrow": os.path.getsize(new)}
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{len(docs)} documents, {text_mb:.1f} MB of text, median CPU seconds of {args.repeat} rounds")
    print("| frames | write s | read s | write+read s | file MB |")
    print("|---|---|---|---|---|")
    for k in ("pickle", "arrow"):
        w, r = med[f"{k}.write"], med[f"{k}.read"]
        print(f"| {k} | {w:.3f} | {r:.3f} | {w + r:.3f} | {sizes[k] / 1e6:.1f} |")
    old_total = med["pickle.write"] + med["pickle.read"]
    new_total = med["arrow.write"] + med["arrow.read"]
    print(f"ratio arrow / pickle (write+read, arrow including its sha256 check): {new_total / old_total:.2f}")


if __name__ == "__main__":
    main()
