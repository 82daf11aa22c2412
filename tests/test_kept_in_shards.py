"""The default recipe on sample_corpus/: the shards hold exactly the kept documents, each followed
by one EOS, and every row is read for training.

The kept documents are rebuilt independently of the packing code: the documents that reached the
tokenizer (the frames of the pass that ends with its training, kept with --keep-work), encoded
again with the run's tokenizer (the reference engine), minus the ones the tokenize stage drops
(no tokens, or the EOS id among them). Packing is the documented concat stream: per split (by
the hash of the id), documents in task order, one EOS after each, cut every row_length tokens,
the last row padded.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dataprep.docstore import read_docs
from dataprep.executor import plan_passes, prepare
from dataprep.formats.bin_shards import iter_bin_file
from dataprep.formats.mindrecord_shards import iter_mindrecord_file
from dataprep.formats.readers_for_training import open_split
from dataprep.formats.rows import RowBatch
from dataprep.formats.verify import verify
from dataprep.recipe import load_recipe
from dataprep.tokenizers.load import load_tokenizer
from stages.pack import split_of

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent
Row = tuple[bytes, tuple[int, ...]]  # (int32 tokens, actual_seq_len)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    out = tmp_path_factory.mktemp("default") / "out"
    stats = prepare(
        [str(ROOT / "sample_corpus")], out, load_recipe("default"), workers=2, quiet=True, keep_work=True
    )
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    return out, stats, manifest


def kept_token_streams(out: Path, manifest: dict[str, Any]) -> dict[str, list[np.ndarray]]:
    """Per split, the token ids of every kept document in stream order (see the module docstring)."""
    recipe = load_recipe("default")
    labels = [s.label for s in recipe.stages]
    tokenize = labels.index("tokenize")
    trained = next(p for p in plan_passes([s.build() for s in recipe.stages]) if p.compute == tokenize)
    tok = load_tokenizer(out / manifest["tokenizer"]["file"])
    tok.use_engine("tokenizers")
    eos = manifest["shards"]["eos_id"]
    fraction = next(s.params.validation_fraction for s in recipe.stages if s.label == "pack")
    streams: dict[str, list[np.ndarray]] = {"train": [], "validation": []}
    frames = sorted((out / "work" / f"pass{trained.index}" / "docs").glob("t*.frames"))
    assert frames
    for path in frames:
        for batch in read_docs(path, 512):
            for doc, ids in zip(batch, tok.encode_batch([d.text for d in batch]), strict=True):
                if len(ids) and not (ids == eos).any():
                    streams[split_of(doc.id, fraction)].append(np.asarray(ids, dtype=np.int32))
    return streams


def expected_rows(docs: list[np.ndarray], row_length: int, eos: int, pad: int) -> list[Row]:
    """The rows of the concat stream of ``docs`` (EOS after each, last row padded)."""
    stream = np.concatenate([np.append(d, eos) for d in docs]).astype(np.int32)
    ends = np.cumsum([len(d) + 1 for d in docs])
    rows = []
    for start in range(0, len(stream), row_length):
        tokens = np.full(row_length, pad, dtype=np.int32)
        piece = stream[start : start + row_length]
        tokens[: len(piece)] = piece
        inner = ends[(ends > start) & (ends < start + len(piece))] - start
        rows.append((tokens.tobytes(), (*inner.tolist(), len(piece))))
    return rows


def shard_rows(out: Path, manifest: dict[str, Any], split: str, fmt: str) -> list[Row]:
    shards = manifest["shards"]
    batches: list[RowBatch] = []
    for entry in shards["splits"][split]["files"]:
        if entry["format"] != fmt:
            continue
        if fmt == "bin":
            batches += iter_bin_file(
                out / entry["path"], out / entry["index"]["path"], shards["dtype"], shards["row_length"]
            )
        else:
            batches += [b for b, _ in iter_mindrecord_file(out / entry["path"], shards["row_length"])]
    rows = []
    for batch in batches:
        for i in range(len(batch)):
            lo, hi = batch.offsets[i], batch.offsets[i + 1]
            rows.append((batch.tokens[i].astype(np.int32).tobytes(), tuple(batch.seg_ends[lo:hi].tolist())))
    return rows


@pytest.mark.parametrize("fmt", ["bin", "mindrecord"])
def test_the_shards_hold_exactly_the_kept_documents_each_with_one_eos(run, fmt: str) -> None:
    out, stats, manifest = run
    shards = manifest["shards"]
    eos, pad, length = shards["eos_id"], shards["pad_id"], shards["row_length"]
    streams = kept_token_streams(out, manifest)
    assert sum(map(len, streams.values())) == stats["totals"]["kept"] == manifest["documents"]["kept"]
    eos_in_shards = 0
    for split, docs in streams.items():
        rows = shard_rows(out, manifest, split, fmt)
        missing = Counter(expected_rows(docs, length, eos, pad)) - Counter(rows)
        extra = Counter(rows) - Counter(expected_rows(docs, length, eos, pad))
        assert not missing and not extra, (
            f"{split} ({fmt}): {sum(missing.values())} rows of kept documents missing from the shards, "
            f"{sum(extra.values())} rows that are not theirs"
        )
        for tokens, ends in rows:  # an EOS is always the last token of a document piece
            ids = np.frombuffer(tokens, dtype=np.int32)
            at = np.flatnonzero(ids[: ends[-1]] == eos) + 1
            assert set(at.tolist()) <= set(ends)
            eos_in_shards += len(at)
    assert eos_in_shards == stats["totals"]["kept"]


def test_the_run_verifies_and_the_rows_left_over_by_equal_files_are_in_the_remainder_file(run) -> None:
    out, _, manifest = run
    assert verify(out) == []
    train = manifest["shards"]["splits"]["train"]
    for fmt in ("bin", "mindrecord"):
        files = [f for f in train["files"] if f["format"] == fmt]
        equal, rest = files[:-1], files[-1]
        assert len(equal) % 8 == 0 and {f["rows"] for f in equal} == {train["equal_files"]["rows"]}
        assert rest.get("remainder") and rest["path"].endswith(f"train-remainder.{fmt}")
        assert 0 < rest["rows"] < len(equal) and sum(f["rows"] for f in files) == train["rows"]


@pytest.mark.parametrize("fmt", ["bin", "mindrecord"])
def test_every_dp_rank_reads_as_many_rows_and_the_remainder_rows_are_trained_on(run, fmt: str) -> None:
    """The pretraining loader over the split's files (equal ones and the remainder), 3 dp ranks,
    two epochs: ranks read the same number of rows, an epoch reads every row but fewer than one
    global batch, and the remainder file's rows are among those read."""
    from pretrain.data import RowSource, StepLoader

    out, _, manifest = run
    shards = manifest["shards"]
    split = open_split(out, "train", fmt)
    assert split.files[-1].name.startswith("train-remainder")
    dp = 3
    read: list[list[set[bytes]]] = []  # per rank, per epoch
    for dp_rank in range(dp):
        src = RowSource(split, dp, dp_rank, seed=3, shuffle=True)
        assert src.total_rows == shards["splits"]["train"]["rows"]
        probe = StepLoader(src, 1, 1, shards["eos_id"], shards["pad_id"], 0, 0)
        per_epoch = probe.steps_per_epoch
        probe.close()
        loader = StepLoader(src, 1, 1, shards["eos_id"], shards["pad_id"], 0, 2 * per_epoch)
        epochs: list[list[bytes]] = [[], []]
        try:
            for step, micro in loader:
                for f in micro:
                    for row in np.c_[f["input_ids"], f["labels"][:, -1:]]:
                        epochs[step // per_epoch].append(row.astype(np.int32).tobytes())
        finally:
            loader.close()
        assert [len(e) for e in epochs] == [per_epoch, per_epoch]
        read.append([set(e) for e in epochs])
    everything = {r for r, _ in shard_rows(out, manifest, "train", "bin")}
    for epoch in range(2):
        assert len(everything - set().union(*(rank[epoch] for rank in read))) < dp
    rest = next(f for f in shards["splits"]["train"]["files"] if f["format"] == "bin" and f.get("remainder"))
    batches = iter_bin_file(
        out / rest["path"], out / rest["index"]["path"], shards["dtype"], shards["row_length"]
    )
    remainder_rows = {row.astype(np.int32).tobytes() for batch in batches for row in batch.tokens}
    assert remainder_rows and remainder_rows <= set().union(*(e for rank in read for e in rank))
