"""Readers: every format, plain and compressed, splits, ids and line numbers."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import SMALL_RECIPE, jsonl_bytes, recipe_with, write_gz, write_zst
from dataprep.inputs import expand_inputs
from dataprep.planning import make_plan
from dataprep.recipe import parse_recipe
from dataprep.stage import ReadReport
from dataprep.stats import StageStats


def read_all(
    paths: list[Path], scratch: Path | None = None, **input_options: object
) -> tuple[list, StageStats, dict]:
    recipe = parse_recipe(recipe_with(**input_options), "test")
    stats = StageStats()
    report = ReadReport(stats, recipe.input["on_error"])
    plan = make_plan(expand_inputs([str(p) for p in paths]), recipe, report, scratch)
    docs = []
    for split in (part for task in plan.tasks for part in task.parts()):
        docs += list(recipe.reader(split.reader).read(split, report))
    return docs, stats, report.samples


ROWS = [{"id": f"d{i}", "text": f"第{i}篇文档。\nsecond line {i}", "lang": "zh"} for i in range(50)]


@pytest.mark.parametrize("writer", ["plain", "gz", "zst"])
def test_jsonl_plain_and_compressed(tmp_path: Path, writer: str) -> None:
    data = jsonl_bytes(ROWS)
    path = {
        "plain": lambda: (tmp_path / "a.jsonl").write_bytes(data) and tmp_path / "a.jsonl",
        "gz": lambda: write_gz(tmp_path / "a.jsonl.gz", data),
        "zst": lambda: write_zst(tmp_path / "a.jsonl.zst", data),
    }[writer]()
    docs, stats, _ = read_all([path])
    assert [d.text for d in docs] == [r["text"] for r in ROWS]
    assert [d.id for d in docs] == [r["id"] for r in ROWS]
    assert docs[0].meta == {"lang": "zh"}
    assert docs[0].source == path.name
    assert stats.docs_in == stats.docs_out == 50


def test_jsonl_custom_fields_and_ids_from_lines(tmp_path: Path) -> None:
    (tmp_path / "b.jsonl").write_text('{"content": "甲"}\n\n{"content": "乙"}\n', encoding="utf-8")
    docs, _, _ = read_all([tmp_path / "b.jsonl"], text_field="content")
    assert [(d.id, d.text) for d in docs] == [("b.jsonl:1", "甲"), ("b.jsonl:3", "乙")]


@pytest.mark.parametrize("compress", [None, "gz", "zst"])
def test_txt_line_and_block_modes(tmp_path: Path, compress: str | None) -> None:
    data = "第一段第一行\n第一段第二行\n\n\n第二段\r\n\nthird\n".encode()
    path = tmp_path / "c.txt"
    if compress == "gz":
        path = write_gz(tmp_path / "c.txt.gz", data)
    elif compress == "zst":
        path = write_zst(tmp_path / "c.txt.zst", data)
    else:
        path.write_bytes(data)
    lines, _, _ = read_all([path])
    assert [(d.id.rsplit(":", 1)[1], d.text) for d in lines] == [
        ("1", "第一段第一行"),
        ("2", "第一段第二行"),
        ("5", "第二段"),
        ("7", "third"),
    ]
    blocks, _, _ = read_all([path], txt_mode="block")
    assert [(d.id.rsplit(":", 1)[1], d.text) for d in blocks] == [
        ("1", "第一段第一行\n第一段第二行"),
        ("5", "第二段"),
        ("7", "third"),
    ]


def test_parquet_rows_and_row_group_splits(tmp_path: Path) -> None:
    table = pa.table(
        {
            "id": [f"p{i}" for i in range(100)],
            "text": [f"行{i}" for i in range(100)],
            "score": list(range(100)),
        }
    )
    pq.write_table(table, tmp_path / "d.parquet", row_group_size=10)
    whole, _, _ = read_all([tmp_path / "d.parquet"])
    split, _, _ = read_all([tmp_path / "d.parquet"], split_bytes=1 << 16)
    assert [d.text for d in whole] == [f"行{i}" for i in range(100)]
    assert [d.id for d in split] == [d.id for d in whole]
    assert whole[5].meta == {"score": 5}


def test_large_file_split_into_tasks_reads_every_line_once(tmp_path: Path) -> None:
    rows = [{"text": f"line {i} " + "字" * (i % 97)} for i in range(6000)]
    path = tmp_path / "big.jsonl"
    path.write_bytes(jsonl_bytes(rows))
    assert path.stat().st_size > 3 * 65536
    recipe = parse_recipe(recipe_with(split_bytes=65536), "test")
    plan = make_plan(expand_inputs([str(path)]), recipe, ReadReport(StageStats(), "skip"))
    assert len(plan.tasks) >= 3
    docs, _, _ = read_all([path], split_bytes=65536)
    assert [d.text for d in docs] == [r["text"] for r in rows]
    # ids carry true line numbers even in later splits
    assert [d.id for d in docs] == [f"big.jsonl:{i + 1}" for i in range(6000)]


def test_directories_and_globs_are_ordered_and_relative(tmp_path: Path) -> None:
    (tmp_path / "z").mkdir()
    (tmp_path / "a").mkdir()
    (tmp_path / "z" / "1.jsonl").write_text(json.dumps({"text": "z"}) + "\n")
    (tmp_path / "a" / "2.jsonl").write_text(json.dumps({"text": "a"}) + "\n")
    (tmp_path / ".hidden.jsonl").write_text(json.dumps({"text": "hidden"}) + "\n")
    files = expand_inputs([str(tmp_path)])
    assert [f.rel for f in files] == ["a/2.jsonl", "z/1.jsonl"]
    globbed = expand_inputs([str(tmp_path / "**" / "*.jsonl")])
    assert [f.rel for f in globbed] == ["a/2.jsonl", "z/1.jsonl"]


def test_unknown_extension_is_noted_not_read(tmp_path: Path) -> None:
    (tmp_path / "notes.csv").write_text("a,b\n")
    (tmp_path / "ok.txt").write_text("hello\n")
    docs, stats, _ = read_all([tmp_path])
    assert [d.text for d in docs] == ["hello"]
    assert stats.counters["files.unsupported"] == 1


def test_small_recipe_is_valid() -> None:
    assert parse_recipe(SMALL_RECIPE, "test").stages[-1].name == "pack"


@pytest.mark.parametrize("compress", ["gz", "zst"])
def test_big_compressed_file_is_chunked_into_tasks_with_true_line_numbers(
    tmp_path: Path, compress: str
) -> None:
    import random

    rng = random.Random(0)
    rows = [
        {"text": "".join(rng.choice("天地玄黄宇宙洪荒abc ") for _ in range(rng.randrange(5, 400)))}
        for _ in range(4000)
    ]
    data = jsonl_bytes(rows) + b"{broken line\n" + jsonl_bytes(rows[:10])
    path = (write_gz if compress == "gz" else write_zst)(tmp_path / f"one.jsonl.{compress}", data)
    assert path.stat().st_size > (1 << 16) // 4
    whole, _, whole_samples = read_all([path], split_bytes=1 << 16, min_tasks=0)
    chunked, _, samples = read_all([path], tmp_path / "scratch", split_bytes=1 << 16)
    recipe = parse_recipe(recipe_with(split_bytes=1 << 16), "test")
    plan = make_plan(expand_inputs([str(path)]), recipe, ReadReport(StageStats(), "skip"), tmp_path / "s2")
    assert len(plan.tasks) >= 4 and all(t.rel == path.name for t in plan.tasks)
    assert [(d.id, d.text) for d in chunked] == [(d.id, d.text) for d in whole]
    assert chunked[-1].id == f"{path.name}:4011"
    assert (
        samples["malformed_json"][0]["where"]
        == whole_samples["malformed_json"][0]["where"]
        == f"{path.name}:4001"
    )
    # without scratch space (or with enough tasks already) nothing is decompressed ahead
    assert len(make_plan(expand_inputs([str(path)]), recipe, ReadReport(StageStats(), "skip")).tasks) == 1


def test_small_corpus_is_cut_finer_so_every_worker_gets_work(tmp_path: Path) -> None:
    rows = [{"text": f"第{i}行 " + "字" * (i % 300)} for i in range(20000)]
    path = tmp_path / "mid.jsonl"
    path.write_bytes(jsonl_bytes(rows))
    size = path.stat().st_size
    assert 4 << 20 < size < 128 << 20  # one task at the default split size
    default = parse_recipe(recipe_with(), "test")
    plan = make_plan(expand_inputs([str(path)]), default, ReadReport(StageStats(), "skip"))
    assert len(plan.tasks) >= 4
    assert all(t.end - t.start < (1 << 20) + 2000 for t in plan.tasks)  # 1 MiB, cut at a line end
    assert sum(t.end - t.start for t in plan.tasks) == size
    off = parse_recipe(recipe_with(min_tasks=0), "test")
    assert len(make_plan(expand_inputs([str(path)]), off, ReadReport(StageStats(), "skip")).tasks) == 1
    calls: list[str] = []

    def recording_map(fn, items):  # the finer cut goes through the executor's map too
        calls.append(fn.__name__)
        return [fn(x) for x in items]

    mapped = make_plan(
        expand_inputs([str(path)]), default, ReadReport(StageStats(), "skip"), parallel_map=recording_map
    )
    assert calls == ["_scan_files", "_split_file"] and mapped.tasks == plan.tasks


def test_files_are_planned_and_hashed_through_the_parallel_map_in_jobs_of_many_files(tmp_path: Path) -> None:
    import hashlib
    import multiprocessing as mp

    rows = [{"text": f"第{i}行 " + "字" * (i % 200)} for i in range(3000)]
    (tmp_path / "big.jsonl").write_bytes(jsonl_bytes(rows))
    write_zst(tmp_path / "small.jsonl.zst", jsonl_bytes(ROWS))
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "blob.txt").write_bytes(bytes(range(256)) * 64)
    (tmp_path / "notes.pdf").write_bytes(b"%PDF-1.4")
    files = expand_inputs([str(tmp_path)])
    recipe = parse_recipe(recipe_with(split_bytes=1 << 16, min_tasks=0), "test")
    calls: list[int] = []

    def pool_map(fn, items):  # the executor's workers: module-level fn, arguments pickled
        calls.append(len(items))
        with mp.get_context("spawn").Pool(2) as pool:
            return pool.map(fn, items)

    serial_stats, pooled_stats = StageStats(), StageStats()
    serial = make_plan(files, recipe, ReadReport(serial_stats, "skip"), hash_files=True)
    pooled_report = ReadReport(pooled_stats, "skip")
    pooled = make_plan(files, recipe, pooled_report, parallel_map=pool_map, hash_files=True)
    assert calls == [1] and len(files) == 5  # one job plans the five files
    assert pooled.to_json() == serial.to_json()
    assert pooled_stats.to_json() == serial_stats.to_json()
    assert len(pooled.tasks) > 4  # big.jsonl is cut at 64 KiB
    assert [n["kind"] for n in pooled.file_notes] == ["empty_file", "unsupported"]
    # a small uncompressed text file is only listed: its reader checks that it is text
    blob = [t for task in pooled.tasks for t in task.parts() if t.rel == "blob.txt"]
    assert [(t.start, t.end, t.sniff, t.sha256) for t in blob] == [(0, 256 * 64, True, "")]
    assert pooled_stats.counters == {"files.empty_file": 1, "files.unsupported": 1, "files.read": 2}

    def digest(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    content = {f.rel: Path(f.path).read_bytes() for f in files}
    # no task reads these files: hashed while planned; small.jsonl.zst is hashed by its task
    assert pooled.sha256 == {k: digest(content[k]) for k in ("empty.jsonl", "notes.pdf")}
    # big.jsonl is read whole to be cut: the file and each range hashed by that read
    assert pooled.read_sha256 == {"big.jsonl": digest(content["big.jsonl"])}
    ranges = [t for task in pooled.tasks for t in task.parts() if t.rel == "big.jsonl"]
    assert [t.sha256 for t in ranges] == [digest(content["big.jsonl"][t.start : t.end]) for t in ranges]
    unhashed = make_plan(files, recipe, ReadReport(StageStats(), "skip"))
    assert unhashed.sha256 == unhashed.read_sha256 == {}  # only when asked


def test_compressed_files_are_chunked_one_job_each_through_the_parallel_map(tmp_path: Path) -> None:
    import multiprocessing as mp
    import random

    rng = random.Random(1)
    (tmp_path / "in").mkdir()
    for name in ("a", "b"):
        rows = [{"text": "".join(rng.choices("天地玄黄宇宙洪荒abc ", k=300))} for _ in range(2000)]
        write_gz(tmp_path / "in" / f"{name}.jsonl.gz", jsonl_bytes(rows))
    files = expand_inputs([str(tmp_path / "in")])
    recipe = parse_recipe(recipe_with(split_bytes=1 << 16), "test")
    calls: list[int] = []

    def pool_map(fn, items):
        calls.append(len(items))
        with mp.get_context("spawn").Pool(2) as pool:
            return pool.map(fn, items)

    def chunks(plan) -> list[tuple]:
        return [(t.rel, t.first_line, t.nbytes, Path(t.path).read_bytes()) for t in plan.tasks]

    report = ReadReport(StageStats(), "skip")
    serial = make_plan(files, recipe, report, tmp_path / "s1")
    pooled = make_plan(files, recipe, report, tmp_path / "s2", parallel_map=pool_map)
    assert calls == [1, 2]  # one planning job for both files, one decompression job per file
    assert len(pooled.tasks) > 4 and chunks(pooled) == chunks(serial)


_HEADS = [
    "春眠不觉晓，处处闻啼鸟。\n夜来风雨声。\n".encode(),
    "旧编码的中文文本，一行又一行。\n".encode("gb18030") * 30,
    "繁體中文的舊檔案。\n".encode("big5") * 30,
    ("宽字符文本\n第二行\n" * 50).encode("utf-16"),  # with its byte-order mark: lines counted decoded
    "宽字符文本\n第二行\n".encode("utf-16-le") * 20,  # without
    b"\xef\xbb\xbf" + "带标记的文本\n".encode(),
    bytes(range(256)) * 8,
    b"ok line\n\x00\x00\x00\x01\x02 mostly binary after \x03\x04\x05\x06" * 40,
]


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(_HEADS) | st.binary(min_size=1, max_size=3000),
    st.sampled_from(["utf-8", "gb18030"]),
)
def test_a_small_file_left_to_its_reader_reads_as_if_planning_had_sniffed_it(
    tmp_path_factory: pytest.TempPathFactory, content: bytes, encoding: str
) -> None:
    """The check a reader makes of a small file planning only listed (InputSplit.sniff) gives the
    same note, documents and counts as planning's sniff of it."""
    src = tmp_path_factory.mktemp("small") / "f.txt"
    src.write_bytes(content)

    def outcome(left_to_reader: bool) -> tuple[list, list, dict, dict]:
        recipe = parse_recipe(recipe_with(encoding=encoding), "test")
        stats = StageStats()
        report = ReadReport(stats, "skip")
        sniffing = contextlib.nullcontext() if left_to_reader else _planning_sniffs_every_file()
        with sniffing:
            plan = make_plan(expand_inputs([str(src)]), recipe, report)
        assert all(t.sniff == (left_to_reader and encoding == "utf-8") for t in plan.tasks)
        docs = [
            d.text for t in plan.tasks for p in t.parts() for d in recipe.reader(p.reader).read(p, report)
        ]
        notes = [(n["kind"], n["message"]) for n in plan.file_notes + report.file_notes]
        return docs, notes, stats.counters, report.samples

    assert outcome(True) == outcome(False)


def _planning_sniffs_every_file() -> contextlib.AbstractContextManager:
    from unittest import mock

    from dataprep import planning

    return mock.patch.object(planning, "_sniffs_small_files", return_value=False)
