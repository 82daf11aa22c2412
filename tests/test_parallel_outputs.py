"""Work moved off the driver keeps outputs byte-identical: MindRecord files converted from spills
in worker processes, report plots drawn ahead of time, CPU seconds in timings.json."""

from __future__ import annotations

import itertools
import json
import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from conftest import SAMPLE, recipe_with, run
from dataprep.formats.mindrecord import MindRecordFile
from dataprep.formats.rows import RowBatch
from dataprep.report import plot_specs, render, render_plots
from stages import write_mindrecord as wm


def _rows(rng: np.random.Generator, n: int, length: int) -> RowBatch:
    counts = rng.integers(1, 4, size=n).astype(np.int32)
    ends = []
    for c in counts:
        inner = np.sort(rng.choice(np.arange(1, length), size=int(c) - 1, replace=False)).tolist()
        ends += [*inner, length]
    return RowBatch(rng.integers(0, 5000, size=(n, length)).astype(np.int32), np.asarray(ends), counts)


def test_group_jobs_keeps_order_and_a_minimum_size() -> None:
    jobs = [{"batches": [n], "row_length": 1} for n in (5, 1, 1, 9, 2, 2)]
    groups = wm.group_jobs(jobs, min_bytes=4 * 6)  # 6 rows of 4 bytes at least
    assert [j for g in groups for j in g] == jobs
    assert [[j["batches"][0] for j in g] for g in groups] == [[5, 1], [1, 9], [2, 2]]
    assert wm.group_jobs([], 10) == []


@pytest.mark.parametrize(("with_loss_mask", "dtype"), [(False, "int32"), (True, "int32"), (False, "uint16")])
def test_mindrecord_from_spills_in_workers_equals_direct_writing(
    tmp_path: Path, with_loss_mask: bool, dtype: str
) -> None:
    rng = np.random.default_rng(7)
    length = 33
    batches = [_rows(rng, n, length) for n in (700, 1500, 3, 900, 1200)]
    if dtype == "uint16":  # ids up to 65535 survive the uint16 spill
        batches[0].tokens[0, :3] = [65535, 0, 40000]
    plan = {"train": [1800, 1303], "validation": [200]}
    meta = {"plan": plan, "row_length": length, "with_loss_mask": with_loss_mask, "dtype": dtype}
    writer = wm.MindRecordShardWriter(None, tmp_path / "spilled", meta)
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(2, mp_context=ctx) as pool:
        writer.parallel_map = lambda fn, items: list(pool.map(fn, items))
        old = wm.JOB_BYTES
        wm.JOB_BYTES = 1  # one call per file: several calls, several processes
        try:
            for b in batches[:-1]:
                writer.write(b, "train")
            writer.write(batches[-1].select(np.arange(200)), "validation")
            entries = writer.close()
        finally:
            wm.JOB_BYTES = old
    # the same rows written directly, file by file, in the same write calls
    direct = tmp_path / "direct"
    direct.mkdir()
    stream = RowBatch.concat(batches[:-1], length)
    cuts = {"train-00000": (0, 1800), "train-00001": (1800, 3103)}
    sizes = [b.tokens.shape[0] for b in batches[:-1]]
    bounds = np.cumsum([0, *sizes])
    for name, (lo, hi) in cuts.items():
        f = MindRecordFile(direct / f"{name}.mindrecord", with_loss_mask)
        for a, b in itertools.pairwise(bounds):  # the writer's calls: batch x file cuts
            s, e = max(a, lo), min(b, hi)
            if e > s:
                f.write(stream.select(np.arange(s, e)))
        f.commit()
    f = MindRecordFile(direct / "validation-00000.mindrecord", with_loss_mask)
    f.write(batches[-1].select(np.arange(200)))
    f.commit()
    out = tmp_path / "spilled" / "mindrecord"
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in direct.iterdir())
    for p in direct.iterdir():
        assert (out / p.name).read_bytes() == p.read_bytes(), p.name
    assert [e["rows"] for e in entries] == [1800, 1303, 200]
    assert [e["split"] for e in entries] == ["train", "train", "validation"]
    assert not list(out.glob(".*"))  # spills are gone


def test_plots_drawn_ahead_give_the_same_page_and_stale_ones_are_redrawn(tmp_path: Path) -> None:
    out = tmp_path / "o"
    run([SAMPLE / "reviews"], out)
    stats = json.loads((out / "stats.json").read_text())
    manifest = json.loads((out / "manifest.json").read_text())
    page = (out / "report.html").read_text(encoding="utf-8")
    specs = plot_specs(stats)
    assert render(stats, manifest, render_plots(specs)) == page == render(stats, manifest)
    # plots drawn from other numbers are not used
    stale = json.loads(json.dumps(stats))
    stale["stages"][0]["docs_out"] += 1
    assert render(stats, manifest, render_plots(plot_specs(stale))) == page


def test_timings_hold_wall_and_cpu_seconds_per_phase(tmp_path: Path) -> None:
    out = tmp_path / "o"
    run([SAMPLE / "reviews"], out, recipe_with(split_bytes=1 << 16), workers=2)
    timings = json.loads((out / "timings.json").read_text())
    assert timings["workers"] == 2
    assert set(timings["seconds"]) == set(timings["cpu_seconds"])
    for phase in ("plan", "pass0", "finalize", "total"):
        assert timings["seconds"][phase] >= 0 and timings["cpu_seconds"][phase] >= 0
    assert timings["cpu_seconds"]["total"] > 0
