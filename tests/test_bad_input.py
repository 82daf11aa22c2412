"""Every kind of bad input is reported with file and line, counted, and handled per policy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SAMPLE, read_stats, recipe_with, run, stage_stats, write_gz
from dataprep.docstore import read_rejected
from dataprep.stage import InputError

pytestmark = pytest.mark.e2e

GOOD = '{"text": "一段正常的文字，足够长。"}\n'


def problems(out: Path) -> tuple[dict, dict, dict]:
    stats = read_stats(out)
    read = stage_stats(stats, "read")
    return read["drops"], stats["input"]["problems"], stats["input"]["problem_samples"]


def test_invalid_utf8_replaced_by_default_and_dropped_on_request(tmp_path: Path) -> None:
    f = tmp_path / "in.jsonl"
    f.write_bytes(
        GOOD.encode() + b'{"text": "bad \xff\xfe bytes here"}\n' + GOOD.replace("正常", "其他").encode()
    )
    run([f], tmp_path / "o1")
    drops, counters, samples = problems(tmp_path / "o1")
    assert drops == {} and counters["repaired.invalid_utf8"] == 1
    assert samples["invalid_utf8"][0]["where"] == "in.jsonl:2"
    run([f], tmp_path / "o2", recipe_with(invalid_utf8="drop"))
    drops, _, samples = problems(tmp_path / "o2")
    assert drops == {"invalid_utf8": 1}
    assert samples["invalid_utf8"][0]["where"] == "in.jsonl:2"
    rejected = list(read_rejected(tmp_path / "o2" / "rejected" / "read.jsonl.zst"))
    assert [(r["reason"], r["id"]) for r in rejected] == [("invalid_utf8", "in.jsonl:2")]


def test_unpaired_surrogate_escapes_in_json_are_replaced_or_dropped(tmp_path: Path) -> None:
    """json.loads accepts "\\ud800" alone, which no UTF-8 writer can store: repaired like
    invalid UTF-8 (in the text, the id and other fields), never a crash; pairs stay emoji."""
    f = tmp_path / "s.jsonl"
    lone = '{"text": "繁體中文\\ud800字", "id": "x\\udfff", "tag": ["\\ud83d"]}\n'
    pair = '{"text": "笑脸\\ud83d\\ude00很好看的样子"}\n'
    f.write_text(GOOD + lone + pair, encoding="utf-8")
    stats = run([f], tmp_path / "o1")
    drops, counters, samples = problems(tmp_path / "o1")
    assert drops == {} and counters["repaired.invalid_utf8"] == 1
    assert samples["invalid_utf8"][0]["where"] == "s.jsonl:2"
    assert stats["totals"]["docs_in"] == 3
    run([f], tmp_path / "o2", recipe_with(invalid_utf8="drop"))
    drops, _, _ = problems(tmp_path / "o2")
    assert drops == {"invalid_utf8": 1}


def test_nul_bytes_are_removed_and_counted(tmp_path: Path) -> None:
    f = tmp_path / "n.txt"
    f.write_bytes("甲\x00乙丙丁\n".encode() + b"plain line\n")
    run([f], tmp_path / "o")
    drops, counters, samples = problems(tmp_path / "o")
    assert counters["repaired.nul_bytes"] == 1 and samples["nul_bytes"][0]["where"] == "n.txt:1"
    assert drops == {}


def test_binary_and_empty_files_are_reported_per_file(tmp_path: Path) -> None:
    src = tmp_path / "in"
    src.mkdir()
    (src / "blob.txt").write_bytes(bytes(range(256)) * 40)
    (src / "empty.jsonl").write_bytes(b"")
    write_gz(src / "empty2.jsonl.gz", b"")
    (src / "ok.jsonl").write_text(GOOD, encoding="utf-8")
    stats = run([src], tmp_path / "out")
    notes = {(n["file"], n["kind"]) for n in stats["input"]["file_notes"]}
    assert notes == {
        ("blob.txt", "binary_file"),
        ("empty.jsonl", "empty_file"),
        ("empty2.jsonl.gz", "empty_file"),
    }
    assert stats["totals"]["kept"] == 1


def test_overlong_line_is_dropped_without_reading_it_whole(tmp_path: Path) -> None:
    f = tmp_path / "long.txt"
    f.write_bytes(b"short one\n" + b"x" * 200_000 + b"\nshort two\n")
    run([f], tmp_path / "o", recipe_with(max_line_bytes=1024))
    drops, _, samples = problems(tmp_path / "o")
    assert drops == {"line_too_long": 1}
    assert samples["line_too_long"][0]["where"] == "long.txt:2"
    assert read_stats(tmp_path / "o")["totals"] == {
        "docs_in": 3,
        "kept": 2,
        "dropped": 1,
        "dropped_by_reason": {"read/line_too_long": 1},
    }


def test_malformed_json_missing_field_and_wrong_type(tmp_path: Path) -> None:
    f = tmp_path / "m.jsonl"
    f.write_text(
        GOOD
        + '{"text": "unterminated\n'
        + '{"body": "x"}\n'
        + '{"text": 5}\n'
        + "[1, 2]\n"
        + GOOD.replace("正常", "另外"),
        encoding="utf-8",
    )
    run([f], tmp_path / "o")
    drops, _, samples = problems(tmp_path / "o")
    assert drops == {"malformed_json": 2, "missing_field": 1, "bad_field_type": 1}
    assert [s["where"] for s in samples["malformed_json"]] == ["m.jsonl:2", "m.jsonl:5"]
    assert samples["missing_field"][0]["where"] == "m.jsonl:3"
    assert samples["bad_field_type"][0]["where"] == "m.jsonl:4"


def test_truncated_gzip_keeps_what_was_read_and_reports(tmp_path: Path) -> None:
    whole = write_gz(tmp_path / "full.jsonl.gz", (GOOD * 2000).encode())
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    whole.unlink()
    stats = run([cut], tmp_path / "o")
    assert stats["input"]["problems"]["files.read_error"] == 1
    assert stats["input"]["problem_samples"]["read_error"][0]["where"].startswith("cut.jsonl.gz:")


def test_on_error_stop_names_file_and_line(tmp_path: Path) -> None:
    f = tmp_path / "m.jsonl"
    f.write_text(GOOD + "{broken\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"m\.jsonl:2: malformed JSON"):
        run([f], tmp_path / "o", recipe_with(on_error="stop"))


def test_cli_missing_input_and_bad_recipe_exit_2(tmp_path: Path) -> None:
    exe = [sys.executable, "-m", "dataprep.cli"]
    r = subprocess.run(
        [*exe, "prepare", str(tmp_path / "nope"), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "does not exist" in r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("stages: [nonexistent_stage]\n")
    r = subprocess.run(
        [*exe, "prepare", str(SAMPLE), "--out", str(tmp_path / "o"), "--recipe", str(bad)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "unknown stage 'nonexistent_stage'" in r.stderr
    assert r.stderr.strip().count("\n") == 0
    r = subprocess.run(
        [*exe, "prepare", str(SAMPLE), "--out", str(tmp_path / "o"), "--recipe", str(tmp_path / "x.yaml")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "neither a file nor a built-in recipe" in r.stderr


def test_cli_on_error_stop_exits_1_with_location(tmp_path: Path) -> None:
    recipe = tmp_path / "stop.yaml"
    recipe.write_text("input: {on_error: stop}\nstages: [normalize]\n")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "dataprep.cli",
            "prepare",
            str(SAMPLE / "adversarial" / "malformed.jsonl"),
            "--out",
            str(tmp_path / "o"),
            "--recipe",
            str(recipe),
            "--quiet",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1
    assert "malformed.jsonl:2" in r.stderr and "on_error" in r.stderr
