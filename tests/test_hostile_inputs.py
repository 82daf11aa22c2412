"""Hostile inputs and real corpus layouts: each case checks the exit code or outcome, the one-line
message naming the file (and line), the exact accounting (documents in = kept + dropped by
reason) and, where the run completes, ``dataprep verify``."""

from __future__ import annotations

import gzip
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

pytestmark = pytest.mark.e2e  # every case runs prepare (see docs/architecture.md#tests)

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
    from dataprep.inputs import expand_inputs
    from dataprep.planning import make_plan
    from dataprep.recipe import load_recipe
    from dataprep.stage.reader import ReadReport, read_task
    from dataprep.stats import StageStats
    from stages.read_jsonl import JsonlReader

    f = tmp_path / "a.jsonl"
    f.write_text(good_lines(3), encoding="utf-8")
    recipe = load_recipe("default")
    report = ReadReport(StageStats(), "skip")
    plan = make_plan(expand_inputs([str(f)]), recipe, report)
    f.unlink()
    reader = recipe.reader(JsonlReader.name)
    assert list(read_task(plan.tasks[0], lambda name: reader, report)) == []
    assert report.samples["read_error"][0]["where"] == "a.jsonl"
    assert "No such file" in report.samples["read_error"][0]["message"]


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
        # decompressed into chunks first (for min_tasks): the same line named, the same lines read
        chunked = tmp_path / f"chunked-{name}"
        run([cut], chunked, recipe_with(group_files=False))  # one task per chunk
        assert read_stats(chunked)["input"]["tasks"] > 1
        assert samples(chunked)["read_error"] == [sample]
        assert accounting(chunked)[::2] == (n_in, {})
        verify(chunked)
        stop = prepare_cli(tmp_path, cut, tmp_path / f"stop-{name}", min_tasks=0, on_error="stop")
        assert stop.returncode == 1 and len(stop.stderr.strip().splitlines()) == 1
        assert stop.stderr.startswith(f"error: {name}:{line}: cannot read further")


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


def stop_line(where: str, message: str) -> list[str]:
    """The one line a run under ``on_error: stop`` prints for a problem at ``where``."""
    return [f"error: {where}: {message} (input.on_error is 'stop'; fix the input or set it to 'skip')"]


def test_gb18030_with_input_encoding_and_named_without_it(tmp_path: Path) -> None:
    src = tmp_path / "in"
    src.mkdir()
    old = src / "old.txt"  # GB18030, with one line (11) that is not
    old.write_bytes(
        ("\n".join(ZH[:10]) + "\n").encode("gb18030")
        + b"\x81\x20bad\n"
        + ("\n".join(ZH[10:]) + "\n").encode("gb18030")
    )
    (src / "good.txt").write_text(ZH[0] + "\n", encoding="utf-8")  # UTF-8: read as UTF-8 whatever is declared
    r = prepare_cli(tmp_path, src, tmp_path / "out", encoding="gb18030", min_tasks=0)
    assert r.returncode == 0, r.stderr
    n_in, _, drops = accounting(tmp_path / "out")
    assert n_in == 32 and drops == {}  # 31 lines of old.txt, the bad one repaired, and good.txt's
    s = samples(tmp_path / "out")
    assert s["invalid_encoding"] == [
        {"where": "old.txt:11", "message": "invalid gb18030 at byte 0 (replaced with U+FFFD)"}
    ]
    verify(tmp_path / "out")
    r = prepare_cli(tmp_path, src, tmp_path / "drop", encoding="gb18030", invalid_utf8="drop", min_tasks=0)
    assert r.returncode == 0 and accounting(tmp_path / "drop")[2] == {"invalid_encoding": 1}
    verify(tmp_path / "drop")
    r = prepare_cli(
        tmp_path, src, tmp_path / "stop", encoding="gb18030", invalid_utf8="drop", on_error="stop"
    )
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == stop_line("old.txt:11", "invalid gb18030 at byte 0")

    # undeclared: named, with the encoding charset-normalizer finds, and skipped (or stops the run)
    (src / "old.txt").write_bytes(("\n".join(ZH) + "\n").encode("gb18030"))
    message = "not UTF-8; charset-normalizer finds gb18030: set input.encoding: gb18030"
    r = prepare_cli(tmp_path, src, tmp_path / "plain")
    assert r.returncode == 0, r.stderr
    assert read_stats(tmp_path / "plain")["input"]["file_notes"] == [
        {"file": "old.txt", "kind": "not_utf8", "message": message}
    ]
    assert accounting(tmp_path / "plain") == (1, 1, {})
    verify(tmp_path / "plain")
    r = prepare_cli(tmp_path, src, tmp_path / "plain-stop", on_error="stop")
    assert r.returncode == 1 and r.stderr.strip().splitlines() == stop_line("old.txt", message)


def test_big5_named_and_read_with_input_encoding(tmp_path: Path) -> None:
    traditional = (
        "\n".join(["學而時習之，不亦說乎？有朋自遠方來，不亦樂乎？人不知而不慍，不亦君子乎？"] * 20) + "\n"
    )
    f = tmp_path / "b.txt"
    f.write_bytes(traditional.encode("big5"))
    r = prepare_cli(tmp_path, f, tmp_path / "plain")
    assert r.returncode == 1  # nothing else to read: the run says no document was read
    assert "not_utf8 1 (first: b.txt)" in r.stderr
    assert read_stats(tmp_path / "plain")["input"]["file_notes"][0]["message"] == (
        "not UTF-8; charset-normalizer finds big5: set input.encoding: big5"
    )
    r = prepare_cli(tmp_path, f, tmp_path / "big5", encoding="big5")
    assert r.returncode == 0, r.stderr
    n_in, _, drops = accounting(tmp_path / "big5")
    assert n_in == 20 and drops == {}
    assert read_stats(tmp_path / "big5")["input"]["problems"] == {"files.read": 1}
    verify(tmp_path / "big5")


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be"])
def test_utf16_with_a_bom_is_read_whatever_input_encoding_says(tmp_path: Path, codec: str) -> None:
    """UTF-16 LE and BE text and JSONL with a byte-order mark: read as the text they are, with
    the default input.encoding and with another one declared (the mark decides)."""
    bom = b"\xff\xfe" if codec.endswith("le") else b"\xfe\xff"
    src = tmp_path / "in"
    src.mkdir()
    (src / "t.txt").write_bytes(bom + ("\n".join(ZH) + "\n").encode(codec))
    (src / "j.jsonl").write_bytes(bom + good_lines(20).encode(codec))
    for declared in ("utf-8", "gb18030"):
        out = tmp_path / f"out-{declared}"
        r = prepare_cli(tmp_path, src, out, encoding=declared)
        assert r.returncode == 0, r.stderr
        n_in, kept, drops = accounting(out)
        assert n_in == 50 and kept > 0 and drops == {}
        assert read_stats(out)["input"]["problems"] == {"files.read": 2}  # no repair, no note
        verify(out)


def test_utf16_without_a_bom_is_named_and_read_when_declared(tmp_path: Path) -> None:
    f = tmp_path / "u.txt"
    f.write_bytes(("\n".join(ZH) + "\n").encode("utf-16-le"))
    message = "utf-16-le without a byte-order mark (charset-normalizer): set input.encoding: utf-16-le"
    r = prepare_cli(tmp_path, f, tmp_path / "plain", on_error="stop")
    assert r.returncode == 1 and r.stderr.strip().splitlines() == stop_line("u.txt", message)
    r = prepare_cli(tmp_path, f, tmp_path / "declared", encoding="utf-16-le")
    assert r.returncode == 0, r.stderr
    n_in, _, drops = accounting(tmp_path / "declared")
    assert n_in == 30 and drops == {}
    verify(tmp_path / "declared")


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


# A run of the small recipe (shards in .bin only: MindRecord's writer loads MindSpore) peaks at
# about 175 MiB resident on a tiny input. Holding a 200 MB line, or a 1 GB decompressed bomb,
# whole would add at least its size: the bound sits between.
PEAK_RSS_BOUND_MIB = 330


def bin_recipe(tmp_path: Path, name: str, **input_options: object) -> Path:
    recipe = recipe_with(**input_options)
    recipe["stages"][-1] = {"pack": {"seq_length": 64, "writers": ["bin"]}}
    return write_recipe(tmp_path / f"{name}.yaml", recipe)


def prepare_with_peak_rss(
    inp: Path, out: Path, recipe: Path
) -> tuple[subprocess.CompletedProcess[str], float]:
    """(the `dataprep prepare` run, the largest resident memory of it or any of its processes in
    MiB): run under a Python parent whose children's rusage is theirs alone."""
    code = (
        "import json, resource, subprocess, sys\n"
        "r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024\n"
        "print(json.dumps({'rc': r.returncode, 'err': r.stderr, 'peak': peak}))\n"
    )
    cmd = [sys.executable, "-m", "dataprep.cli", "prepare", str(inp), "--out", str(out)]
    cmd += ["--recipe", str(recipe), "--quiet", "--workers", "1"]
    r = subprocess.run(
        [sys.executable, "-c", code, *cmd], capture_output=True, text=True, cwd=REPO, timeout=900
    )
    assert r.returncode == 0, r.stderr
    found = json.loads(r.stdout)
    return subprocess.CompletedProcess(cmd, found["rc"], "", found["err"]), found["peak"]


def write_gz_stream(path: Path, parts: list[tuple[bytes, int]]) -> Path:
    """A gzip file of each (bytes, times) part written ``times`` times, streaming."""
    with gzip.GzipFile(path, "wb", mtime=0, compresslevel=6) as f:
        for data, times in parts:
            for _ in range(times):
                f.write(data)
    return path


def test_gzip_bomb_is_read_streaming_and_its_line_dropped(tmp_path: Path) -> None:
    """1 GB of zero bytes gzipped (about 1 MB): alone, a binary file; after 200 JSONL records, a
    1 GB line dropped as line_too_long on its line, the records around it kept. Memory stays
    flat (the line is never held)."""
    src = tmp_path / "in"
    src.mkdir()
    zeros = (b"\x00" * (1 << 20), 1024)
    write_gz_stream(src / "zeros.txt.gz", [zeros])
    records = good_lines(20).encode()
    bomb = write_gz_stream(src / "bomb.jsonl.gz", [(records, 10), zeros, (b"\n" + records, 1)])
    assert bomb.stat().st_size < 4 << 20
    r, peak = prepare_with_peak_rss(src, tmp_path / "out", bin_recipe(tmp_path, "r"))
    assert r.returncode == 0, r.stderr
    assert peak < PEAK_RSS_BOUND_MIB, peak
    stats = read_stats(tmp_path / "out")
    assert stats["input"]["file_notes"] == [
        {
            "file": "zeros.txt.gz",
            "kind": "binary_file",
            "message": "looks binary (control bytes or undecodable text), skipped",
        }
    ]
    n_in, _, drops = accounting(tmp_path / "out")
    assert n_in == 221 and drops == {"line_too_long": 1}
    limit = "line longer than input.max_line_bytes=16777216"
    assert samples(tmp_path / "out")["line_too_long"] == [{"where": "bomb.jsonl.gz:201", "message": limit}]
    verify(tmp_path / "out")
    r, peak = prepare_with_peak_rss(bomb, tmp_path / "stop", bin_recipe(tmp_path, "s", on_error="stop"))
    assert r.returncode == 1 and r.stderr.strip().splitlines() == stop_line("bomb.jsonl.gz:201", limit)
    assert peak < PEAK_RSS_BOUND_MIB, peak


@pytest.mark.parametrize("name", ["big.txt", "big.jsonl"])
def test_a_200_mb_line_is_dropped_on_its_line_with_memory_flat(tmp_path: Path, name: str) -> None:
    line = "".join(ZH).encode()
    repeat = 200_000_000 // len(line) + 1
    with open(tmp_path / name, "wb") as f:
        if name.endswith(".jsonl"):
            f.write(good_lines(10).encode() + b'{"text": "')
            for _ in range(repeat):
                f.write(line)
            f.write(b'"}\n' + good_lines(10).encode())
        else:
            f.write(("\n".join(ZH[:10]) + "\n").encode())
            for _ in range(repeat):
                f.write(line)
            f.write(("\n" + "\n".join(ZH[10:20]) + "\n").encode())
    assert (tmp_path / name).stat().st_size > 200_000_000
    r, peak = prepare_with_peak_rss(tmp_path / name, tmp_path / "out", bin_recipe(tmp_path, "r"))
    assert r.returncode == 0, r.stderr
    assert peak < PEAK_RSS_BOUND_MIB, peak
    n_in, kept, drops = accounting(tmp_path / "out")
    assert n_in == 21 and drops == {"line_too_long": 1} and kept > 0
    limit = "line longer than input.max_line_bytes=16777216"
    assert samples(tmp_path / "out")["line_too_long"] == [{"where": f"{name}:11", "message": limit}]
    verify(tmp_path / "out")
    r = prepare_cli(tmp_path, tmp_path / name, tmp_path / "stop", on_error="stop")
    assert r.returncode == 1 and r.stderr.strip().splitlines() == stop_line(f"{name}:11", limit)
