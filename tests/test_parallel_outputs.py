"""Work moved off the driver keeps outputs byte-identical: shard files written from the shuffle's
parts in worker processes, report plots drawn ahead of time, CPU seconds in timings.json."""

from __future__ import annotations

import json
import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from conftest import SAMPLE, recipe_with, run
from dataprep.formats import bin_shards as wb
from dataprep.formats import mindrecord_shards as wm
from dataprep.formats.binrows import open_rows
from dataprep.formats.mindrecord import MindRecordFile
from dataprep.formats.registry import ShardMeta
from dataprep.formats.rows import RowBatch
from dataprep.report import plot_specs, rejected_examples, render, render_plots
from dataprep.shards.files import ShardFileJob, write_shard_file
from dataprep.shards.plan import TOKEN_DTYPES, ShardPlan
from dataprep.shards.spool import Buckets, RowSpool, ScatterJob, merge_buckets, read_part, scatter_bucket


def _rows(rng: np.random.Generator, n: int, length: int) -> RowBatch:
    counts = rng.integers(1, 4, size=n).astype(np.int32)
    ends = []
    for c in counts:
        inner = np.sort(rng.choice(np.arange(1, length), size=int(c) - 1, replace=False)).tolist()
        ends += [*inner, length]
    return RowBatch(rng.integers(0, 5000, size=(n, length)).astype(np.int32), np.asarray(ends), counts)


@pytest.mark.parametrize(("with_loss_mask", "dtype"), [(False, "int32"), (True, "int32"), (False, "uint16")])
def test_shard_files_written_by_worker_processes_equal_direct_writing(
    tmp_path: Path, with_loss_mask: bool, dtype: str
) -> None:
    rng = np.random.default_rng(7)
    length = 33
    rows = RowBatch.concat([_rows(rng, n, length) for n in (700, 1500, 3, 900)], length)
    if dtype == "uint16":  # ids up to 65535 survive uint16 spool and parts
        rows.tokens[0, :3] = [65535, 0, 40000]
    token_dtype = TOKEN_DTYPES[dtype]
    plan = {"train": [1800, 1303]}
    meta = ShardMeta(length, dtype, 1 << 16, 2, with_loss_mask, {"train": ShardPlan(plan["train"])})
    (tmp_path / "spool").mkdir()
    spool = RowSpool(tmp_path / "spool", "t", length, token_dtype, Buckets(None, 1, 1000))
    spool.add(rows, np.arange(len(rows)))
    parts_dir = tmp_path / "parts"
    parts_dir.mkdir()
    files: list[list[tuple[str, list[int]]]] = [[], []]
    start = 0
    for i, bucket in enumerate(merge_buckets([spool.close()])):
        job = ScatterJob(
            "train",
            i,
            bucket,
            length,
            token_dtype,
            2,
            start,
            np.cumsum(plan["train"]),
            None,
            str(parts_dir),
        )
        for k, path, batches in scatter_bucket(job)["parts"]:
            files[k].append((path, batches))
        start += bucket.rows
    shard_dir = tmp_path / "shards"
    writers = ["mindrecord", "bin"]
    for w in (wm.MindRecordShardWriter, wb.BinShardWriter):
        w(shard_dir, meta).prepare()
    # the same batches written directly, in this process, before the parts are consumed
    direct = tmp_path / "direct"
    direct.mkdir()
    for k, file_parts in enumerate(files):
        f = MindRecordFile(direct / f"train-{k:05d}.mindrecord", with_loss_mask)
        for path, batches in file_parts:
            for batch in read_part(path, batches, length, token_dtype):
                f.write(batch)
        f.commit()
    jobs = [
        ShardFileJob("train", k, plan["train"][k], parts, writers, str(shard_dir), meta)
        for k, parts in enumerate(files)
    ]
    with ProcessPoolExecutor(2, mp_context=mp.get_context("spawn")) as pool:
        entries = list(pool.map(write_shard_file, jobs))
    wm.MindRecordShardWriter(shard_dir, meta).commit()
    out = shard_dir / "mindrecord" / "train"  # one directory per split
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in direct.iterdir())
    for p in direct.iterdir():
        assert (out / p.name).read_bytes() == p.read_bytes(), p.name
    assert [[e["format"] for e in file] for file in entries] == [writers, writers]
    assert [file[0]["rows"] for file in entries] == [1800, 1303]
    written = np.concatenate(
        [open_rows(shard_dir / "bin" / f"train-{k:05d}.bin", dtype, length) for k in range(2)]
    )
    assert np.array_equal(written, rows.tokens[:3103])
    assert len(list(parts_dir.iterdir())) == sum(len(f) for f in files)  # a retried job finds them


@pytest.mark.e2e
def test_plots_drawn_ahead_give_the_same_page_and_stale_ones_are_redrawn(tmp_path: Path) -> None:
    out = tmp_path / "o"
    run([SAMPLE / "reviews"], out)
    stats = json.loads((out / "stats.json").read_text())
    manifest = json.loads((out / "manifest.json").read_text())
    page = (out / "report.html").read_text(encoding="utf-8")
    specs = plot_specs(stats)
    examples = rejected_examples(out)
    assert examples  # the page shows example documents of the drops
    assert (
        render(stats, manifest, render_plots(specs), examples)
        == page
        == render(stats, manifest, None, examples)
    )
    # plots drawn from other numbers are not used
    stale = json.loads(json.dumps(stats))
    stale["stages"][0]["docs_out"] += 1
    assert render(stats, manifest, render_plots(plot_specs(stale)), examples) == page


@pytest.mark.e2e
def test_timings_hold_wall_and_cpu_seconds_per_phase(tmp_path: Path) -> None:
    out = tmp_path / "o"
    run([SAMPLE / "reviews"], out, recipe_with(split_bytes=1 << 16), workers=2)
    timings = json.loads((out / "timings.json").read_text())
    assert timings["workers"] == 2
    assert set(timings["seconds"]) == set(timings["cpu_seconds"]) == set(timings["driver_cpu_seconds"])
    for phase in ("plan", "pass0", "finalize", "total"):
        assert timings["seconds"][phase] >= 0 and timings["cpu_seconds"][phase] >= 0
    assert timings["cpu_seconds"]["total"] > 0
    # the driver's own share: the pass runs on the workers, and the driver's CPU is part of the total
    driver = timings["driver_cpu_seconds"]
    assert 0 < driver["total"] <= timings["cpu_seconds"]["total"] + 0.05
    assert driver["pass0"] < timings["cpu_seconds"]["pass0"]
