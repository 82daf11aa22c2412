"""Hostile inputs and real corpus layouts: each case checks the exit code or outcome, the one-line
message naming the file (and line), the exact accounting (documents in = kept + dropped by
reason) and, where the run completes, ``dataprep verify``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import (
    REPO,
    SAMPLE,
    output_bytes,
    read_stats,
    recipe_with,
    run,
    stage_stats,
    write_gz,
    write_recipe,
    write_zst,
)

REVIEWS = [
    x for x in (SAMPLE / "reviews" / "reviews.txt").read_text(encoding="utf-8").splitlines() if len(x) > 20
]


def accounting(out: Path) -> tuple[int, int, dict[str, int]]:
    """(documents read by the reader, documents kept at the end, the reader's drops by reason),
    asserting that the reader's records are its documents plus its drops."""
    stats = read_stats(out)
    read = stage_stats(stats, "read")
    assert read["docs_in"] == read["docs_out"] + sum(read["drops"].values())
    totals = stats["totals"]
    assert totals["docs_in"] == totals["kept"] + sum(totals["dropped_by_reason"].values())
    return read["docs_in"], totals["kept"], read["drops"]


def verify(out: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "dataprep.cli", "verify", str(out)], capture_output=True, text=True, cwd=REPO
    )
    assert r.returncode == 0, r.stdout + r.stderr


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dataprep.cli", *args], capture_output=True, text=True, cwd=REPO, timeout=600
    )


def small_files(root: Path, n: int) -> list[str]:
    """n files (n a multiple of 100) of one review line each, the second half repeating the first
    (for exact_dedup), under two directories."""
    texts = []
    for i in range(n):
        text = REVIEWS[i % 50] + f" 第{i % (n // 2 or 1)}号"  # file i + n/2 repeats file i (n/2 % 50 == 0)
        d = root / f"d{i % 2}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:06d}.txt").write_text(text + "\n", encoding="utf-8")
        texts.append(text)
    return texts


@pytest.mark.e2e
def test_small_files_are_grouped_by_bytes_and_outputs_do_not_depend_on_grouping(tmp_path: Path) -> None:
    small_files(tmp_path / "in", 600)
    grouped = tmp_path / "grouped"
    run([tmp_path / "in"], grouped, workers=2, keep_work=True)
    plan = json.loads((grouped / "work" / "plan.json").read_text())["plan"]
    assert len(plan["tasks"]) == 1  # 600 small files: one task of at most 1 MiB
    assert len(plan["tasks"][0]["more"]) == 599
    n_in, kept, drops = accounting(grouped)
    assert n_in == 600 and drops == {} and kept == 300
    assert stage_stats(read_stats(grouped), "exact_dedup")["drops"] == {"duplicate": 300}
    single = tmp_path / "single"
    run([tmp_path / "in"], single, recipe_with(group_files=False), workers=2, keep_work=True)
    assert len(json.loads((single / "work" / "plan.json").read_text())["plan"]["tasks"]) == 600
    ours, theirs = output_bytes(grouped), output_bytes(single)
    shards = [k for k in theirs if k.startswith("shards/")]
    assert shards and all(ours[k] == theirs[k] for k in shards)
    verify(grouped)


GOOD = [json.dumps({"text": t}, ensure_ascii=False) for t in REVIEWS[:20]]


def good_lines(n: int = 20) -> str:
    return "".join(x + "\n" for x in GOOD[:n])


def prepare_cli(
    tmp_path: Path, inp: Path, out: Path, **input_options: object
) -> subprocess.CompletedProcess[str]:
    recipe = write_recipe(tmp_path / f"r-{out.name}.yaml", recipe_with(**input_options))
    return cli("prepare", str(inp), "--out", str(out), "--recipe", str(recipe), "--quiet", "--workers", "1")


def samples(out: Path) -> dict[str, list[dict[str, str]]]:
    return read_stats(out)["input"]["problem_samples"]


@pytest.mark.e2e
def test_symlink_loop_dangling_link_fifo_and_socket_are_noted_and_skipped(tmp_path: Path) -> None:
    src = tmp_path / "in"
    src.mkdir()
    (src / "ok.jsonl").write_text(good_lines(), encoding="utf-8")
    (src / "loop.jsonl").symlink_to("loop.jsonl")
    (src / "gone.jsonl").symlink_to("nowhere.jsonl")
    os.mkfifo(src / "pipe.jsonl")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(src / "s.jsonl"))
    (src / "sub").mkdir()
    (src / "sub" / "up").symlink_to("..")  # a directory loop: each directory is walked once
    stats = run([src], tmp_path / "out")
    sock.close()
    notes = {n["file"]: n["kind"] for n in stats["input"]["file_notes"]}
    assert notes == {
        "loop.jsonl": "link_loop",
        "gone.jsonl": "dangling_link",
        "pipe.jsonl": "special_file",
        "s.jsonl": "special_file",
    }
    n_in, kept, drops = accounting(tmp_path / "out")
    assert n_in == 20 and kept == 20 and drops == {}
    verify(tmp_path / "out")
    r = prepare_cli(tmp_path, src, tmp_path / "stop", on_error="stop")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "error: gone.jsonl: symbolic link to 'nowhere.jsonl', which does not exist "
        "(input.on_error is 'stop'; fix the input or set it to 'skip')"
    ]


@pytest.mark.e2e
def test_symlinked_directory_is_read_once(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "a.jsonl").write_text(good_lines(10), encoding="utf-8")
    src = tmp_path / "in"
    src.mkdir()
    (src / "linked").symlink_to(real)
    (src / "again").symlink_to(real)  # the same directory twice: read once
    run([src], tmp_path / "out")
    n_in, kept, _ = accounting(tmp_path / "out")
    assert n_in == 10 and kept == 10
    verify(tmp_path / "out")


def test_a_file_gone_between_plan_and_read_is_named(tmp_path: Path) -> None:
    from dataprep.plan import expand_inputs, make_plan
    from dataprep.recipe import load_recipe
    from dataprep.stage import ReadReport, read_task
    from dataprep.stats import StageStats
    from stages.read_jsonl import JsonlReader

    f = tmp_path / "a.jsonl"
    f.write_text(good_lines(3), encoding="utf-8")
    recipe = load_recipe("default")
    report = ReadReport(StageStats(), "skip")
    plan = make_plan(expand_inputs([str(f)]), recipe, report)
    f.unlink()
    reader = JsonlReader(recipe.reader_params(JsonlReader))
    assert list(read_task(plan.tasks[0], lambda name: reader, report)) == []
    assert report.samples["read_error"][0]["where"] == "a.jsonl"
    assert "No such file" in report.samples["read_error"][0]["message"]


@pytest.mark.e2e
def test_out_a_file_or_inside_an_input_is_a_one_line_error(tmp_path: Path) -> None:
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jsonl").write_text(good_lines(3), encoding="utf-8")
    (tmp_path / "file").write_text("x")
    r = prepare_cli(tmp_path, src, tmp_path / "file")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        f"error: --out {tmp_path / 'file'} is a file, not a directory: "
        "give a directory (created when missing)"
    ]
    r = prepare_cli(tmp_path, src, src / "out")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        f"error: --out {src / 'out'} is inside the input {src}: give an output directory outside every input"
    ]


@pytest.mark.e2e
def test_truncated_gz_and_zst_are_read_errors_and_the_cut_record_is_dropped(tmp_path: Path) -> None:
    n = 20_000  # lines, of about 1.6 MB: a dozen zstd blocks
    rows = (json.dumps({"text": f"{REVIEWS[i % len(REVIEWS)]} {i}"}, ensure_ascii=False) for i in range(n))
    data = "".join(r + "\n" for r in rows).encode()
    for name, write in (("t.jsonl.gz", write_gz), ("t.jsonl.zst", write_zst), ("u.txt.zst", write_zst)):
        full = write(tmp_path / ("full-" + name), data)
        cut = tmp_path / name
        cut.write_bytes(full.read_bytes()[: full.stat().st_size * 2 // 3])
        out = tmp_path / f"out-{name}"
        run([cut], out, recipe_with(min_tasks=0))
        n_in, _, drops = accounting(out)
        sample = samples(out)["read_error"][0]
        assert sample["where"].startswith(f"{name}:")
        assert "truncated" in sample["message"] or "ended before" in sample["message"]
        line = int(sample["where"].rsplit(":", 1)[1])
        assert 1 < line < n and n_in == line - 1 and drops == {}  # every line before the cut, none after
        stop = prepare_cli(tmp_path, cut, tmp_path / f"stop-{name}", min_tasks=0, on_error="stop")
        assert stop.returncode == 1 and len(stop.stderr.strip().splitlines()) == 1
        assert stop.stderr.startswith(f"error: {name}:{line}: cannot read further")


@pytest.mark.e2e
def test_deep_json_huge_integers_nan_and_infinity_are_dropped_with_file_and_line(tmp_path: Path) -> None:
    f = tmp_path / "j.jsonl"
    bad = [
        '{"text": "深", "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
        '{"text": "大", "n": ' + "9" * 5000 + "}",
        '{"text": "非数", "v": NaN}',
        '{"text": "无穷", "v": -Infinity}',
        '{"text": "溢出", "v": 1e999}',
    ]
    f.write_text(GOOD[0] + "\n" + "\n".join(bad) + "\n" + GOOD[1] + "\n", encoding="utf-8")
    run([f], tmp_path / "out")
    n_in, kept, drops = accounting(tmp_path / "out")
    assert (n_in, kept, drops) == (7, 2, {"malformed_json": 5})
    wheres = [s["where"] for s in samples(tmp_path / "out")["malformed_json"]]
    assert wheres == [f"j.jsonl:{k}" for k in range(2, 7)]
    verify(tmp_path / "out")
    r = prepare_cli(tmp_path, f, tmp_path / "stop", on_error="stop")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "error: j.jsonl:2: JSON nested too deep to parse "
        "(input.on_error is 'stop'; fix the input or set it to 'skip')"
    ]


def write_parquet(path: Path, texts: list, groups: int = 4) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": texts}), path, row_group_size=max(len(texts) // groups, 1))
    return path


@pytest.mark.e2e
def test_corrupt_or_truncated_parquet_and_bad_text_column(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    texts = [REVIEWS[i % len(REVIEWS)] + f" {i}" for i in range(400)]
    good = write_parquet(tmp_path / "good.parquet", texts)
    meta = pq.ParquetFile(good).metadata
    page = meta.row_group(2).column(0).data_page_offset
    data = bytearray(good.read_bytes())
    data[page : page + 64] = b"\xff" * 64  # the third row group's page header, footer intact
    src = tmp_path / "in"
    src.mkdir()
    (src / "corrupt.parquet").write_bytes(bytes(data))
    (src / "truncated.parquet").write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    write_parquet(src / "ints.parquet", list(range(10)), groups=1)
    import pyarrow as pa

    pq.write_table(pa.table({"body": texts[:5]}), src / "nocol.parquet")
    run([src], tmp_path / "out", recipe_with(min_tasks=0))
    stats = read_stats(tmp_path / "out")
    notes = {n["file"]: n["kind"] for n in stats["input"]["file_notes"]}
    assert notes == {"truncated.parquet": "read_error"}
    n_in, _, drops = accounting(tmp_path / "out")
    assert drops == {"bad_field_type": 10}
    assert n_in == 300 + 10  # the corrupt file but its third row group, and the ints
    s = samples(tmp_path / "out")
    assert [x["where"] for x in s["read_error"]] == ["truncated.parquet", "corrupt.parquet:201"]
    assert s["missing_field"][0]["where"] == "nocol.parquet"
    assert s["bad_field_type"][0]["where"] == "ints.parquet:1"
    verify(tmp_path / "out")


ZH = REVIEWS[:30]


@pytest.mark.e2e
@pytest.mark.parametrize("codec", ["utf-16", "utf-32", "utf-8-sig"])
def test_byte_order_marks_decide_the_encoding(tmp_path: Path, codec: str) -> None:
    """UTF-16/32 text (the codec writes its BOM) and a UTF-8 BOM JSONL: every record read as
    the text it is, the first one included, no repair."""
    src = tmp_path / "in"
    src.mkdir()
    (src / "t.txt").write_bytes(("\n".join(ZH) + "\n").encode(codec))
    (src / "j.jsonl").write_bytes(good_lines(20).encode(codec))
    run([src], tmp_path / "out")
    n_in, kept, drops = accounting(tmp_path / "out")
    assert n_in == 50 and kept > 0 and drops == {}
    problems = read_stats(tmp_path / "out")["input"]["problems"]
    assert not any(k.startswith("repaired") for k in problems)
    verify(tmp_path / "out")


@pytest.mark.e2e
def test_gb18030_with_input_encoding_and_named_without_it(tmp_path: Path) -> None:
    f = tmp_path / "old.txt"
    f.write_bytes(("\n".join(ZH) + "\n").encode("gb18030"))
    good = tmp_path / "good.txt"
    good.write_text(ZH[0] + "\n", encoding="utf-8")
    run([f, good], tmp_path / "out", recipe_with(encoding="gb18030", min_tasks=0))
    n_in, _, drops = accounting(tmp_path / "out")
    assert n_in == 31 and drops == {}
    verify(tmp_path / "out")
    run([f, good], tmp_path / "plain")
    notes = read_stats(tmp_path / "plain")["input"]["file_notes"]
    assert notes == [
        {
            "file": "old.txt/old.txt",  # with several inputs, rel starts with the input name
            "kind": "not_utf8",
            "message": "not UTF-8 (legacy Chinese text is often GB18030 or Big5): set input.encoding",
        }
    ]


@pytest.mark.e2e
@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_workers_must_be_at_least_one_or_auto(tmp_path: Path, value: str) -> None:
    r = cli("prepare", str(SAMPLE / "reviews"), "--out", str(tmp_path / "o"), "--workers", value)
    assert r.returncode == 2
    assert f"--workers: must be a whole number of at least 1, or 'auto' (got '{value}')" in r.stderr
    assert not (tmp_path / "o").exists()


def tokenizer_recipe(tmp_path: Path, tokenizer: str) -> Path:
    recipe = recipe_with()
    recipe["stages"][2] = {"tokenize": {"tokenizer": tokenizer}}
    return write_recipe(tmp_path / "tok.yaml", recipe)


@pytest.mark.e2e
def test_tokenizer_paths_that_are_no_tokenizer_are_refused_before_any_copy(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(50 << 20)  # 50 MB of NUL bytes: read only its head
    src = tmp_path / "in.jsonl"
    src.write_text(good_lines(), encoding="utf-8")
    for path, message in (
        ("/dev/zero", "tokenizer /dev/zero is not a regular file"),
        (str(big), f"{big} is not a tokenizer (neither a tokenizer.json nor a SentencePiece .model)"),
    ):
        out = tmp_path / f"o{len(message)}"
        r = cli("prepare", str(src), "--out", str(out), "--recipe", str(tokenizer_recipe(tmp_path, path)))
        assert r.returncode != 0 and message in r.stderr, r.stderr
        copied = (
            [p for p in out.rglob("*") if p.is_file() and p.stat().st_size > 1 << 20] if out.exists() else []
        )
        assert copied == []


@pytest.mark.e2e
def test_a_source_name_starting_with_a_dot_is_refused_saying_so(tmp_path: Path) -> None:
    recipe = recipe_with()
    recipe["sources"] = [{"name": ".hidden", "inputs": [str(SAMPLE / "reviews")], "share": 1.0}]
    r = cli(
        "prepare", "--out", str(tmp_path / "o"), "--recipe", str(write_recipe(tmp_path / "s.yaml", recipe))
    )
    assert r.returncode == 2
    assert "does not start with '.' (got '.hidden')" in r.stderr


def test_train_tokenizer_warns_when_the_vocabulary_is_smaller_than_asked(tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text("\n".join(ZH) + "\n", encoding="utf-8")
    r = cli("train-tokenizer", str(src), "--out", str(tmp_path / "tok"), "--vocab-size", "100000")
    assert r.returncode == 0, r.stderr
    assert "fewer than the 100,000 asked" in r.stderr
