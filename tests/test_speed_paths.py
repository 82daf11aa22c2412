"""The fast paths of a run's start and end give what the general paths give: JSONL lines parsed by
orjson from their bytes, plans made in the driver, intermediates removed from several threads, a
file's compression read from its name without splitting the path."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dataprep.executor.boot import PLAN_IN_DRIVER_BYTES, PLAN_IN_DRIVER_FILES, plan_map
from dataprep.executor.sweep import remove_all
from dataprep.inputs import InputFile
from dataprep.io import compression_of, logical_suffix, read_work_json, write_work_json
from dataprep.plan import Plan
from stages.read_jsonl import _parse, parse_flat

LINES = [
    b'{"text": "\xe6\x98\xa5\xe7\x9c\xa0", "id": "a"}\n',
    b'{"text":"\\ud83d\\ude00 \\u00e9 \\/ \\u0000","id":7,"ok":true,"none":null}\r\n',
    b'  {"text": "x", "text": "y", "n": 18446744073709551615}  \n',
    b'{"id": -9223372036854775808, "text": ""}',
    b'{"text": "\xef\xbf\xbe"}\n',
]
NOT_FLAT = [
    b'{"text": "a", "n": 18446744073709551616}\n',  # beyond 64 bits: orjson would give a float
    b'{"text": "a", "n": -9223372036854775809}\n',
    b'{"text": "a", "x": 1.5}\n',  # floats go the general way
    b'{"text": "a", "m": {"k": 1}}\n',  # nesting too (depth limits stay the general path's)
    b'{"text": "a", "l": [1]}\n',
    b'{"text": "\\ud800"}\n',  # an unpaired surrogate: repaired or dropped by the general path
    b'{"text": "a\xed\xa0\x80"}\n',  # a surrogate encoded in UTF-8: invalid
    b'{"text": "a\xff"}\n',
    b'{"text": "a\tb"}\n',  # a raw control character: malformed
    b'{"text": "a\x00b"}\n',
    b'{"a": NaN, "text": "t"}\n',
    b'{"a": 1e400, "text": "t"}\n',
    b'{"text": "a"} {"text": "b"}\n',
    b'{"text": "a",}\n',
    b'["text"]\n',
    b"\n",
    b"[" * 5000 + b"]" * 5000 + b"\n",
]


@pytest.mark.parametrize("raw", LINES)
def test_flat_lines_parse_as_the_general_path_does(raw: bytes) -> None:
    flat = parse_flat(raw)
    expected = _parse(raw.decode("utf-8").rstrip("\r\n"))
    assert flat == expected
    assert [type(v) for v in flat.values()] == [type(v) for v in expected.values()]  # type: ignore[union-attr]
    assert list(flat) == list(expected)  # type: ignore[arg-type]


@pytest.mark.parametrize("raw", NOT_FLAT)
def test_other_lines_go_the_general_way(raw: bytes) -> None:
    assert parse_flat(raw) is None


def test_reader_keeps_file_line_of_bad_records_beside_flat_ones(tmp_path: Path) -> None:
    from dataprep.inputs import expand_inputs
    from dataprep.planning import make_plan
    from dataprep.recipe import parse_recipe
    from dataprep.stage import ReadReport
    from dataprep.stage.reader import read_task
    from dataprep.stats import StageStats

    lines = [
        b'{"text": "good", "id": 1}\n',
        b'{"text": "a", "x": 1.5}\n',
        b'{"text": 3}\n',
        b'{"nope": "x"}\n',
    ]
    (tmp_path / "a.jsonl").write_bytes(b"".join(lines))
    recipe = parse_recipe({"stages": []}, "test")
    plan = make_plan(expand_inputs([str(tmp_path / "a.jsonl")]), recipe, ReadReport(StageStats(), "skip"))
    samples: list[str] = []

    class Report(ReadReport):
        def _sample(self, kind: str, where: str, message: str) -> None:
            samples.append(f"{kind} {where}")

    docs = [d for split in plan.tasks for d in read_task(split, recipe.reader, Report(StageStats(), "skip"))]
    assert [(d.id, d.text, d.meta) for d in docs] == [("1", "good", {}), ("a.jsonl:2", "a", {"x": 1.5})]
    assert samples == ["bad_field_type a.jsonl:3", "missing_field a.jsonl:4"]


def test_small_uncompressed_inputs_are_planned_in_the_driver(tmp_path: Path) -> None:
    class NoMap:
        def map(self, fn, items):  # type: ignore[no-untyped-def]
            raise AssertionError("the executor's map was used")

    small = [InputFile(str(tmp_path / "a.jsonl"), "a.jsonl", 1000, 0)]
    assert plan_map(NoMap(), small)(lambda x: x + 1, [1, 2]) == [2, 3]  # type: ignore[arg-type]
    big = [InputFile(str(tmp_path / "a.jsonl"), "a.jsonl", PLAN_IN_DRIVER_BYTES + 1, 0)]
    gz = [InputFile(str(tmp_path / "a.jsonl.gz"), "a.jsonl.gz", 1000, 0)]
    executor = NoMap()
    assert plan_map(executor, big) == executor.map  # type: ignore[arg-type]
    assert plan_map(executor, gz) == executor.map  # type: ignore[arg-type]
    many = [
        InputFile(str(tmp_path / f"{i}.txt"), f"{i}.txt", 1000, 0) for i in range(PLAN_IN_DRIVER_FILES + 1)
    ]
    assert plan_map(executor, many) == executor.map  # type: ignore[arg-type]


def test_remove_all_removes_trees_files_and_links_without_following_them(tmp_path: Path) -> None:
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "precious").write_text("x")
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    for i in range(20):
        (tree / "a" / "b" / f"f{i}").write_bytes(b"x" * i)
    (tree / "a" / "link").symlink_to(keep, target_is_directory=True)
    single = tmp_path / "single"
    single.write_text("y")
    remove_all([tree, single, tmp_path / "missing"])
    assert not tree.exists() and not single.exists()
    assert (keep / "precious").read_text() == "x"


def test_warm_ups_queued_behind_a_pass_are_sent_once_per_worker(tmp_path: Path) -> None:
    from dataprep.executor.pool import LocalExecutor
    from dataprep.executor.warmup import EachWorker, WarmUps, warm_up, warm_up_in_each_worker

    calls: list[str] = []

    def load(_: object) -> None:
        calls.append("load")

    class Writer:
        def warm_ups(self) -> list:
            return [load]

    submitted: list[tuple] = []
    warm_ups = WarmUps.on_pool([Writer(), Writer()], lambda fn, arg: submitted.append(("now", arg)), 2)  # type: ignore[list-item]
    warm_ups.run_at_pass_end([0, 1], lambda fn, arg: submitted.append((fn, arg)), tmp_path)
    meet = str(tmp_path / "warm-up-1")
    assert submitted == [(warm_up_in_each_worker, EachWorker(load, meet, 2))] * 2
    warm_ups.run_after(-1)  # started already: not again
    assert len(submitted) == 2
    one = LocalExecutor(1)
    one.submit_after_pass(warm_up, load)  # no pool: at once
    assert calls == ["load"]


def _note_pid(directory: str, _: object = None) -> None:
    Path(directory, f"ran-in-{os.getpid()}").touch()


def _busy(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def test_a_warm_up_sent_once_per_worker_runs_in_each_worker(tmp_path: Path) -> None:
    """The copies of a warm-up meet: a worker that takes one keeps it until the others are
    taken, so the second copy waits for the worker still busy (without the meeting the idle
    worker would take both, the second a no-op, and the busy one would have none)."""
    from dataprep.executor.pool import LocalExecutor
    from dataprep.executor.warmup import EachWorker, warm_up_in_each_worker

    ran = tmp_path / "ran"
    ran.mkdir()
    pool = LocalExecutor(2)
    try:
        busy = pool.submit(_busy, 1.0)
        job = EachWorker(functools.partial(_note_pid, str(ran)), str(tmp_path / "meet"), 2)
        copies = [pool.submit(warm_up_in_each_worker, job) for _ in range(2)]
        for c in copies:
            c.result(timeout=60)
        assert len(set(os.listdir(ran))) == 2
        assert f"ran-in-{busy.result()}" in os.listdir(ran)
    finally:
        pool.close()


def _name_suffix(name: str) -> str:
    dot = name.rfind(".")
    return name[dot:] if 0 < dot < len(name) - 1 else ""


@given(st.lists(st.sampled_from(["a", ".", "/", "gz", "zst", "ZSTD", "jsonl", "x"]), max_size=9).map("".join))
def test_compression_and_format_are_read_from_the_suffixes_of_the_file_name(path: str) -> None:
    name = os.path.basename(path)
    compression = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}.get(_name_suffix(name).lower())
    assert compression_of(path) == compression
    under = name[: -len(_name_suffix(name))] if compression else name
    assert logical_suffix(path) == _name_suffix(under).lower()


@pytest.mark.parametrize(
    "value",
    [
        {"plan": {"files": [{"path": "/a/中.txt", "size": 3, "mtime_ns": 1_700_000_000_000_000_000}]}},
        {"file": "bad-\udcff-name.txt", "n": 1},  # a file name that is not UTF-8 (surrogateescape)
        {"big": 1 << 70, "neg": -(1 << 64)},  # orjson would read these back as floats
        {"1": None, "x": [True, False, "", 0.5]},
    ],
)
def test_work_json_reads_back_what_it_wrote(tmp_path: Path, value: object) -> None:
    write_work_json(tmp_path / "w.json", value)
    back = read_work_json(tmp_path / "w.json")
    assert repr(back) == repr(value)  # ints stay ints, not equal floats
    assert json.loads((tmp_path / "w.json").read_text(errors="surrogateescape")) == value


@given(
    st.lists(
        st.builds(
            InputFile,
            st.text(),  # quotes, backslashes, control characters, non-ASCII, lone surrogates
            st.text(),
            st.integers(min_value=0, max_value=1 << 62),
            st.integers(min_value=0, max_value=1 << 62),
        ),
        max_size=5,
    )
)
def test_the_inputs_fingerprint_is_the_sha256_of_their_sorted_json(files: list[InputFile]) -> None:
    key = json.dumps([dataclasses.asdict(f) for f in files], sort_keys=True)
    assert Plan(files, []).fingerprint() == hashlib.sha256(key.encode()).hexdigest()


def test_a_cycle_made_while_garbage_collection_is_paused_is_freed_after() -> None:
    import gc
    import weakref

    from dataprep.plan import gc_paused

    class Node:
        other: object = None

    enabled = gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        a, b = Node(), Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
        del a, b
        assert gone() is not None  # no collection inside the block
    assert gone() is None and gc.isenabled() == enabled


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@given(
    st.lists(
        st.fixed_dictionaries(
            {"path": st.text(), "bytes": st.integers(min_value=-(1 << 70), max_value=1 << 70)},
            optional={"sha256": st.none() | st.text(), "extra": _JSON_VALUES},
        ),
        max_size=4,
    ),
    st.dictionaries(st.text(), _JSON_VALUES, max_size=3),
)
def test_the_manifest_text_is_that_of_json_with_one_space_indents(inputs: list, more: dict) -> None:
    from dataprep.formats.manifest import manifest_text

    doc = {"format_version": 1, "inputs": inputs, **{f"x{k}": v for k, v in more.items()}}
    assert manifest_text(doc) == json.dumps(doc, ensure_ascii=False, indent=1)


def test_a_second_copy_of_a_warm_up_in_one_process_does_not_wait(tmp_path: Path, monkeypatch) -> None:
    """After its wait ran out (the safety net), a worker that takes another copy of the same
    warm-up runs it and does not wait again."""
    from dataprep.executor import warmup

    ran: list[object] = []
    waits: list[float] = []
    sleep = time.sleep
    monkeypatch.setattr(warmup, "MEET_SECONDS", 0.5)
    monkeypatch.setattr(warmup.time, "sleep", lambda s: (waits.append(s), sleep(s)))
    job = warmup.EachWorker(ran.append, str(tmp_path / "meet"), 2)
    warmup.warm_up_in_each_worker(job)  # no other worker: waits for the others until the net
    assert ran == [None] and waits
    waits.clear()
    warmup.warm_up_in_each_worker(job)
    assert ran == [None, None] and not waits
