"""CLI start-up stays light; report.html is self-contained and regenerable."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SAMPLE, run
from dataprep.stats import Histogram


def test_help_and_stages_do_not_import_heavy_libraries() -> None:
    code = (
        "import sys, io, contextlib\n"
        "from dataprep.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['stages'])\n"
        "heavy = ('mindspore', 'tokenizers', 'pyarrow', 'matplotlib', 'opencc')\n"
        "heavy = [m for m in heavy if m in sys.modules]\n"
        "print(heavy)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"
    r = subprocess.run([sys.executable, "-m", "dataprep.cli", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "prepare" in r.stdout


def test_stages_lists_every_kind_with_parameters() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "dataprep.cli", "stages"], capture_output=True, text=True, check=True
    )
    for expected in (
        "reader stages:",
        "jsonl [.jsonl",
        "map stages:",
        "normalize:",
        "global stages:",
        "pack:",
        "seq_length: int = 512",
        "shard formats (pack.writers):",
        "  megatron: ",
        "requires: tokenizer",
    ):
        assert expected in r.stdout


@pytest.mark.e2e
def test_report_has_embedded_plots_and_is_regenerated(tmp_path: Path) -> None:
    out = tmp_path / "o"
    run([SAMPLE / "reviews", SAMPLE / "adversarial"], out)
    html = (out / "report.html").read_text(encoding="utf-8")
    figures = re.findall(r'<figure role="img" aria-label="[^"]*"><svg', html)
    assert len(figures) >= 4  # funnel (documents, characters), drops, lengths: inline SVG
    assert "Input problems" in html and "malformed.jsonl:2" in html
    assert "<script" not in html and not re.search(r"""(?:src|href)=["']?(?:https?:|//)""", html)
    assert "<details><summary>read / malformed_json</summary>" in html  # examples a click away
    # every input problem once (a file without a task is both a file note and a sampled problem)
    table = html.split("<table class='problems'>", 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr><td>(.*?)</td><td>(.*?)</td><td>.*?</td></tr>", table)
    assert ("adversarial/binary.txt", "binary_file") in rows and (
        "adversarial/malformed.jsonl:2",
        "malformed_json",
    ) in rows
    assert len(rows) == len(set(rows))
    # the tokens written, from the manifest, with each split's
    shards = json.loads((out / "manifest.json").read_text(encoding="utf-8"))["shards"]
    splits = " · ".join(f"{name} {s['tokens']:,}" for name, s in shards["splits"].items())
    assert (
        f"<div class='value'>{shards['totals']['tokens']:,}</div><div class='name'>tokens written</div>"
        f"<div class='detail'>{splits}</div>"
    ) in html
    # Chinese text has CJK fonts to fall back on; long URLs and paths wrap
    from dataprep.report import CJK_FONTS

    style = html.split("<style>", 1)[1].split("</style>", 1)[0]
    assert all(f"'{name}'" in style for name in CJK_FONTS) and "overflow-wrap:anywhere" in style
    (out / "report.html").unlink()
    r = subprocess.run(
        [sys.executable, "-m", "dataprep.cli", "report", str(out)], capture_output=True, text=True
    )
    assert r.returncode == 0 and (out / "report.html").exists()
    r = subprocess.run(
        [sys.executable, "-m", "dataprep.cli", "report", str(tmp_path)], capture_output=True, text=True
    )
    assert r.returncode == 2 and "no stats.json" in r.stderr


def test_histogram_bins_and_merge() -> None:
    h = Histogram([0, 1, 2, 4])
    h.add([-1, 0, 0.5, 1, 3.9, 4, 100])
    assert h.counts == [1, 2, 1, 1, 2]
    g = Histogram([0, 1, 2, 4])
    g.add([1.5])
    h.merge(g)
    assert h.counts == [1, 2, 2, 1, 2] and h.total() == 8


@pytest.mark.e2e
def test_a_full_disk_stops_the_run_with_what_to_do_and_the_rerun_resumes(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    import errno

    from conftest import SMALL_RECIPE, write_recipe
    from dataprep import stage as registry
    from dataprep.cli import main

    recipe = write_recipe(tmp_path / "recipe.yaml", SMALL_RECIPE)
    argv = ["prepare", str(SAMPLE / "poetry"), "--out", str(tmp_path / "o"), "--workers", "1"]
    argv += ["--recipe", str(recipe), "--quiet"]
    exact = registry.get("exact_dedup")

    def full(self, ctx):
        raise OSError(errno.ENOSPC, "No space left on device", str(ctx.work_dir / "keys"))

    monkeypatch.setattr(exact, "decide", full)
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "No space left on device" in err and "the file system is full" in err
    assert "rerun the same command to resume" in err
    monkeypatch.undo()
    assert main(argv[:-1]) == 0  # not quiet: it says it resumes
    assert "resuming the run" in capsys.readouterr().err
    assert (tmp_path / "o" / "manifest.json").exists()


def test_a_phase_without_a_total_shows_its_step_and_time_not_a_count(capsys) -> None:
    from dataprep.progress import phase_bar

    bar = phase_bar("minhash_dedup: indexing", None, "round")
    bar.update(1)
    bar.set_description("minhash_dedup: verifying pairs")
    bar.update(1)
    bar.close()
    err = capsys.readouterr().err.replace("\r", "\n")
    lines = [line.strip() for line in err.splitlines() if line.strip()]
    assert lines[-1].startswith("minhash_dedup: verifying pairs [")
    assert "round" not in err and ": :" not in err and "pairs:" not in err
