"""minhash_dedup's distributed decide gives the decisions of a single-process union-find over the
same candidate pairs, whatever its partition and bucket counts; its connected components
(large-star / small-star over bucketed edge files) are a union-find's."""

from __future__ import annotations

import itertools
import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import minhash_reference as ref
import numpy as np
import pyarrow.parquet as pq
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stages.minhash_dedup as md
from conftest import SAMPLE
from dataprep.document import Document
from dataprep.stage import DriverContext, StageContext, build_params
from dataprep.stats import StageStats
from stages import _components as cc
from stages import _minhash_lsh as lsh

TASKS = 3


def tang_poems() -> list[str]:
    """1,000 Tang poems, 300 of them printed in both editions (real near duplicates)."""
    raw = zstandard.ZstdDecompressor().stream_reader(
        (SAMPLE / "poetry" / "tang_two_editions.jsonl.zst").open("rb")
    )
    return [json.loads(line)["text"] for line in raw.read().decode("utf-8").splitlines()]


def chain(text: str, links: int, width: int = 400, step: int = 30) -> list[str]:
    """Windows of ``text`` sliding by ``step`` characters: neighbours have Jaccard ~0.86, windows
    two apart ~0.74, so only the chain makes them one cluster. Widths vary (survivor rule)."""
    return [text[k * step : k * step + width + (k % 3) * 5] for k in range(links)]


@pytest.fixture(scope="module")
def spilled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, list[str]]:
    """Compute spills of the Tang poems plus two chains (one in corpus order, one scattered)
    in TASKS tasks; the decide is run by the tests."""
    poems = tang_poems()
    han = "".join(ch for ch in "".join(poems) if "\u4e00" <= ch <= "\u9fff")
    texts = poems + chain(han, 6) + chain(han[5000:], 12)
    rng = random.Random(0)
    rng.shuffle(texts)  # the chains' links land in random tasks and positions
    docs = [Document(f"d{i}", t) for i, t in enumerate(texts)]
    work = tmp_path_factory.mktemp("spills")
    stage = md.MinhashDedup(build_params(md.MinhashDedupParams, {}, "test"))
    ids = [f"t{t:05d}" for t in range(TASKS)]
    for t in range(TASKS):
        ctx = StageContext(StageStats(), work, ids[t], t, TASKS, 0, {})
        stage.begin_task(ctx)
        part = docs[t::TASKS]
        for i in range(0, len(part), 100):
            stage.compute(part[i : i + 100], ctx)
        stage.finish_compute(ctx)
    return work, stage, ids


def reference(work: Path, ids: list[str], params: Any) -> dict[str, dict[str, list]]:
    """The previous decide, in one process: every candidate pair (documents sharing a band key,
    pairs of a group as ``group_pairs`` gives them) whose exact Jaccard reaches the threshold is
    unioned; survivor = longest, then earliest; others dropped with their Jaccard to it."""
    tables = [pq.read_table(work / f"{t}.bands.parquet") for t in ids]
    offsets = np.cumsum([0] + [len(x) for x in tables])
    length = np.concatenate([x.column("length").to_numpy() for x in tables])
    names = [n for x in tables for n in x.column("id").to_pylist()]
    sets = []
    for t in ids:
        values = np.fromfile(work / f"{t}.shingles.u32", dtype=np.uint32)
        ends = np.fromfile(work / f"{t}.offsets.i64", dtype=np.int64)
        sets += [values[a:b] for a, b in itertools.pairwise(ends)]
    bands, _ = params.band_shape()
    uf = ref.UnionFind(len(sets))
    for j in range(bands):
        keys = np.concatenate([x.column(f"band{j:03d}").to_numpy() for x in tables])
        groups: dict[int, list[int]] = defaultdict(list)
        for i, key in enumerate(keys.tolist()):
            if len(sets[i]):
                groups[key].append(i)
        for members in groups.values():
            if len(members) > 1:
                u, v = lsh.group_pairs(np.array(members), np.array([0]), np.array([len(members)]))
                ok = [
                    ref.jaccard_exact(sets[a], sets[b]) >= params.threshold for a, b in zip(u, v, strict=True)
                ]
                uf.union(u[ok], v[ok])
    clusters: dict[int, list[int]] = defaultdict(list)
    for i, root in enumerate(uf.roots().tolist()):
        clusters[root].append(i)
    dropped = {}  # position -> (survivor, cluster size)
    for members in clusters.values():
        keep = min(members, key=lambda i: (-int(length[i]), i))
        dropped.update({i: (keep, len(members)) for i in members if i != keep})
    out: dict[str, dict[str, list]] = {
        t: {k: [] for k in ("drop", "cluster", "survivor", "size", "score")} for t in ids
    }
    for i, (keep, size) in sorted(dropped.items()):
        t = int(np.searchsorted(offsets, i, side="right")) - 1
        d = out[ids[t]]
        d["drop"].append(i - int(offsets[t]))
        d["cluster"].append(keep)
        d["survivor"].append(names[keep])
        d["size"].append(size)
        d["score"].append(round(ref.jaccard_exact(sets[i], sets[keep]), 6))
    return out


def run_decide(work: Path, stage: Any, ids: list[str]) -> tuple[dict[str, dict], StageStats]:
    stats = StageStats()
    stage.decide(DriverContext(work, work / "output", ids, 0, {}, stats, quiet=True))
    return {t: json.loads((work / f"{t}.decision.json").read_text()) for t in ids}, stats


@pytest.mark.parametrize("budgets", ["default", "tiny"])
def test_distributed_decide_equals_the_single_process_result(
    spilled: tuple[Path, Any, list[str]], monkeypatch: pytest.MonkeyPatch, budgets: str
) -> None:
    work, stage, ids = spilled
    if budgets == "tiny":  # many partitions and buckets: every shuffle path is used
        monkeypatch.setattr(md, "LSH_PARTITION_KEYS", 1 << 10)
        monkeypatch.setattr(md, "PAIR_BUCKET", 16)
        monkeypatch.setattr(md, "EDGE_BUCKET", 16)
    decisions, stats = run_decide(work, stage, ids)
    expected = reference(work, ids, stage.params)
    assert decisions == expected
    sizes = [s for d in expected.values() for s in d["size"]]
    assert sizes.count(2) >= 40  # poems printed in both editions
    assert 12 in sizes and 6 in sizes  # each chain is one cluster
    assert stats.counters["component_rounds"] >= 2  # the scattered chain needs rounds
    assert not (work / "lsh").exists()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)), max_size=120),
    st.integers(1, 3),
    st.integers(0, 3),
)
def test_connected_components_equal_a_union_find(
    tmp_path: Path, edges: list[tuple[int, int]], files: int, bucket_bits: int
) -> None:
    work = tmp_path / f"cc{abs(hash((tuple(edges), files, bucket_bits)))}"
    work.mkdir()
    u = np.array([a for a, b in edges if a != b], dtype=np.int64)
    v = np.array([b for a, b in edges if a != b], dtype=np.int64)
    inputs = cc.fileset(work, "edges", files)
    for k, path in enumerate(cc.fileset_paths(inputs)):
        cc.write_bucketed(path, cc.edge_records(u[k::files], v[k::files]))
    final, _ = cc.connected_components(
        lambda fn, items: [fn(x) for x in items], inputs, 1 << bucket_bits, work
    )
    records = np.concatenate([np.load(p) for p in cc.fileset_paths(final)])
    centre = {int(x): int(y) for x, y in zip(records["x"], records["y"], strict=True) if y < x}
    assert all(y not in centre for y in centre.values())  # a forest of stars
    uf = ref.UnionFind(61)
    uf.union(u, v)
    roots = uf.roots()
    for node in set(u.tolist()) | set(v.tolist()):
        assert centre.get(node, node) == roots[node]
