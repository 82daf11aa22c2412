"""Data mixing by token budget (recipe ``sources:``): shares met on token counts, deterministic
for any worker count, short sources reported (and stopping under the strict policy), two copies
of a document never in one row, cross-source deduplication keeping the copy of the source of
highest priority, and a source_id on every row of every format."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from stages import _mix
from tests.conftest import REPO, assert_same_outputs, jsonl_bytes, write_recipe

HAN = [chr(c) for c in range(0x4E00, 0x4E00 + 300)]


def _docs(prefix: str, n: int, seed: int, lo: int = 20, hi: int = 60) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {"id": f"{prefix}{i}", "text": "".join(rng.choice(HAN) for _ in range(rng.randint(lo, hi))) + "。"}
        for i in range(n)
    ]


def _corpus(root: Path, shared: list[dict[str, Any]] | None = None) -> dict[str, Path]:
    """Three sources: a small one (upsampled), a large one (downsampled), a middle one."""
    sizes = {"small": 60, "large": 600, "middle": 250}
    paths = {}
    for k, (name, n) in enumerate(sizes.items()):
        d = root / name
        d.mkdir(parents=True)
        rows = _docs(name[0], n, seed=k)
        if shared and name in ("small", "large"):
            rows += [dict(r, id=f"{name}-{r['id']}") for r in shared]
        (d / "part.jsonl").write_bytes(jsonl_bytes(rows))
        paths[name] = d
    return paths


def _recipe(paths: dict[str, Path], mix: dict[str, Any] | None = None, **pack: Any) -> dict[str, Any]:
    recipe: dict[str, Any] = {
        "name": "mixed",
        "seed": 3,
        "sources": [
            {"name": "small", "inputs": [str(paths["small"])], "share": 0.2, "max_epochs": 4},
            {"name": "large", "inputs": [str(paths["large"])], "share": 0.5},
            {"name": "middle", "inputs": [str(paths["middle"])], "share": 0.3, "max_epochs": 2},
        ],
        "stages": [
            {"exact_dedup": {}},
            {"tokenize": {"tokenizer": "train", "vocab_size": 400, "train_sample_bytes": 200_000}},
            {"pack": {"seq_length": 64, "writers": ["bin"], "shard_multiple": 2, **pack}},
        ],
    }
    if mix:
        recipe["mix"] = mix
    return recipe


def _prepare(recipe: dict[str, Any], out: Path, workers: int = 1) -> dict[str, Any]:
    from dataprep.executor import prepare
    from dataprep.recipe import load_recipe

    out.mkdir(parents=True, exist_ok=True)
    path = write_recipe(out.parent / f".{out.name}.recipe.yaml", recipe)
    return prepare([], out, load_recipe(str(path)), workers=workers, quiet=True)


def _manifest(out: Path) -> dict[str, Any]:
    return json.loads((out / "manifest.json").read_text(encoding="utf-8"))


def _rows(out: Path, split: str = "train") -> dict[str, Any]:
    """Every row of a split read through the format module: tokens, boundaries, source ids."""
    from dataprep.formats.bin_shards import BinRows
    from dataprep.formats.readers_for_training import open_split

    rows = BinRows(open_split(out, split, "bin"))
    return rows.read(np.arange(len(rows)))


@pytest.fixture(scope="module")
def mixed_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, Path]]:
    root = tmp_path_factory.mktemp("mix")
    paths = _corpus(root / "in")
    one, two = root / "w1", root / "w2"
    _prepare(_recipe(paths), one, workers=1)
    _prepare(_recipe(paths), two, workers=2)
    return one, two, paths


# -- the mix itself ------------------------------------------------------------------------------


@pytest.mark.e2e
def test_identical_shards_with_one_and_two_workers(mixed_runs: tuple[Path, Path, dict[str, Path]]) -> None:
    one, two, _ = mixed_runs
    assert (one / "shards" / "bin" / "train-00000.src").exists()
    assert_same_outputs(two, one)


@pytest.mark.e2e
def test_achieved_shares_within_tolerance_on_tokens(mixed_runs: tuple[Path, Path, dict[str, Path]]) -> None:
    one, _, _ = mixed_runs
    mix = _manifest(one)["mix"]
    assert mix["met"] and mix["short"] == []
    written = {name: s["tokens_written"] for name, s in mix["sources"].items()}
    total = sum(written.values())
    assert mix["total_tokens"] == total
    for name, s in mix["sources"].items():
        assert abs(written[name] / total - s["target_share"]) <= 0.005, name
        assert abs(s["achieved_share"] - s["target_share"]) <= mix["tolerance"]
        assert s["epochs"] <= s["max_epochs"] + 1e-9
    small, large = mix["sources"]["small"], mix["sources"]["large"]
    assert small["docs_written"] > small["docs_kept"]  # upsampled: whole documents repeated
    assert large["docs_kept"] < large["docs_available"]  # downsampled
    assert large["docs_written"] == large["docs_kept"]
    # the tokens written are what the train split holds (documents plus their EOS)
    train = _manifest(one)["shards"]["splits"]["train"]
    assert train["doc_tokens"] + train["documents"] == total
    assert train["documents"] == sum(s["docs_written"] for s in mix["sources"].values())


@pytest.mark.e2e
def test_report_shows_target_against_achieved(
    mixed_runs: tuple[Path, Path, dict[str, Path]], tmp_path: Path
) -> None:
    one, _, _ = mixed_runs
    page = (one / "report.html").read_text(encoding="utf-8")
    mix = _manifest(one)["mix"]
    assert "<h2 id='mix'>Data mix</h2>" in page and "Every source is within the tolerance" in page
    assert "share of the training tokens per source" in page
    for name, s in mix["sources"].items():
        row = (
            f"<td>{name}</td><td>{100 * s['target_share']:.2f}%</td><td>{100 * s['achieved_share']:.2f}%</td>"
        )
        assert row in page
        card = f"<div class='value'>{s['tokens_written']:,}</div><div class='name'>{name}</div>"
        assert card in page  # the summary's tokens written per source
    from test_report_browser import browser_findings, find_browser

    findings = browser_findings(find_browser(), one / "report.html", tmp_path)
    assert findings["errors"] == [] and findings["overlaps"] == [] and findings["outside"] == []
    assert findings["wide"] == [] and findings["page_width"] <= findings["window_width"]  # 11 columns


@pytest.mark.e2e
def test_downsampled_documents_rejected_and_stats_per_source(
    mixed_runs: tuple[Path, Path, dict[str, Path]],
) -> None:
    one, _, _ = mixed_runs
    stats = json.loads((one / "stats.json").read_text(encoding="utf-8"))
    mix = _manifest(one)["mix"]
    assert set(stats["mix"]["sources"]) == {"small", "large", "middle"}
    with zstandard.open(one / "rejected" / "pack.jsonl.zst", "rt", encoding="utf-8") as f:
        rejected = [json.loads(line) for line in f]
    not_chosen = [r for r in rejected if r["reason"] == "mix_not_chosen"]
    for name, s in stats["mix"]["sources"].items():
        assert s["docs_input"] == {"small": 60, "large": 600, "middle": 250}[name]
        assert s["target_share"] == mix["sources"][name]["target_share"]
        dropped = [r for r in not_chosen if r["source"].startswith(f"{name}/")]
        assert len(dropped) == s["docs_available"] - s["docs_kept"]
    assert stats["totals"]["dropped_by_reason"]["pack/mix_not_chosen"] == len(not_chosen)


@pytest.mark.e2e
def test_every_row_has_its_source_and_no_row_holds_two_copies(
    mixed_runs: tuple[Path, Path, dict[str, Path]],
) -> None:
    one, _, _ = mixed_runs
    manifest = _manifest(one)
    shards = manifest["shards"]
    assert shards["sources"] == ["small", "large", "middle"]
    assert "source_id" in shards["columns"]
    rows = _rows(one)
    sources = rows["source_id"]
    assert len(sources) == shards["splits"]["train"]["rows"]
    counts = np.bincount(sources, minlength=3)
    for s in manifest["mix"]["sources"].values():
        assert counts[s["source_id"]] == s["rows"] > 0
    # documents are unique random text: equal complete pieces in one row are two copies
    checked = 0
    for tokens, ends in zip(rows["input_ids"], rows["actual_seq_len"], strict=True):
        starts = [0, *ends[:-1].tolist()]
        pieces = [tuple(tokens[a:b].tolist()) for a, b in zip(starts, ends.tolist(), strict=True)]
        whole = pieces[1:-1]  # the first and last piece may be cut by the row's edges
        assert len(set(whole)) == len(whole)
        for edge in (pieces[0], pieces[-1]):
            assert all(edge[-len(w) :] != w and edge[: len(w)] != w for w in whole if len(pieces) > 2)
        checked += len(whole)
    assert checked > 100


@pytest.mark.e2e
def test_source_id_in_mindrecord(tmp_path: Path) -> None:
    paths = _corpus(tmp_path / "in")
    out = tmp_path / "out"
    _prepare(_recipe(paths, writers=["bin", "mindrecord"]), out)
    from dataprep.formats.mindrecord import read_rows

    files = sorted((out / "shards" / "mindrecord" / "train").glob("train-*.mindrecord"))
    from_mr = np.concatenate([[int(r["source_id"]) for r in read_rows(f)] for f in files])
    assert np.array_equal(from_mr, _rows(out)["source_id"])


@pytest.mark.e2e
def test_short_source_reported_and_strict_stops(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    paths = _corpus(tmp_path / "in")
    out = tmp_path / "warn"
    _prepare(_recipe(paths, mix={"total_tokens": 10**6}), out)
    mix = _manifest(out)["mix"]
    assert "small" in mix["short"]
    small = mix["sources"]["small"]
    assert small["short_tokens"] == pytest.approx(0.2 * 10**6 - 4 * small["tokens_available"], abs=1)
    assert small["epochs"] == pytest.approx(4.0, abs=0.01)
    assert not mix["met"]
    assert "source 'small' is short by" in capfd.readouterr().err
    page = (out / "report.html").read_text(encoding="utf-8")
    assert f"The mix was not met:</b> small short by {int(small['short_tokens']):,} tokens" in page
    # strict: the run stops before any shard is written, saying which source and by how much
    from dataprep.stage import InputError

    strict = tmp_path / "strict"
    with pytest.raises(InputError, match=r"source 'small' is short by \d+ tokens"):
        _prepare(_recipe(paths, mix={"total_tokens": 10**6, "policy": "strict"}), strict)
    assert not (strict / "shards").exists()
    assert not any((strict / "work").rglob("shards"))


@pytest.mark.e2e
def test_cross_source_dedup_keeps_the_copy_of_highest_priority(tmp_path: Path) -> None:
    shared = _docs("dup", 15, seed=99)
    paths = _corpus(tmp_path / "in", shared=shared)
    recipe = _recipe(paths)
    recipe["sources"][1]["priority"] = 5  # large beats small (listed first)
    out = tmp_path / "out"
    _prepare(recipe, out)
    with zstandard.open(out / "rejected" / "exact_dedup.jsonl.zst", "rt", encoding="utf-8") as f:
        dups = [json.loads(line) for line in f]
    assert sorted(r["id"] for r in dups) == sorted(f"small-{d['id']}" for d in shared)
    # and the default: earlier in the list wins
    out2 = tmp_path / "out2"
    _prepare(_recipe(paths), out2)
    with zstandard.open(out2 / "rejected" / "exact_dedup.jsonl.zst", "rt", encoding="utf-8") as f:
        dups2 = [json.loads(line) for line in f]
    assert sorted(r["id"] for r in dups2) == sorted(f"large-{d['id']}" for d in shared)


@pytest.mark.e2e
def test_cli_needs_no_input_with_sources(tmp_path: Path) -> None:
    paths = _corpus(tmp_path / "in")
    recipe = write_recipe(tmp_path / "r.yaml", _recipe(paths))
    cmd = [sys.executable, "-m", "dataprep.cli", "prepare", "--recipe", str(recipe), "--quiet"]
    bad = subprocess.run(
        [*cmd, str(paths["small"]), "--out", str(tmp_path / "o1")], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "give no INPUT" in bad.stderr
    ok = subprocess.run([*cmd, "--out", str(tmp_path / "o2")], capture_output=True, text=True, cwd=REPO)
    assert ok.returncode == 0, ok.stderr
    assert _manifest(tmp_path / "o2")["mix"]["met"]


def test_recipe_validation(tmp_path: Path) -> None:
    from dataprep.recipe import load_recipe
    from dataprep.stage import RecipeError

    paths = {k: tmp_path for k in ("small", "large", "middle")}
    bad_share = _recipe(paths)
    bad_share["sources"][0]["share"] = 0.3
    with pytest.raises(RecipeError, match=r"add up to 1\.1"):
        load_recipe(str(write_recipe(tmp_path / "a.yaml", bad_share)))
    bestfit = _recipe(paths, packing="bestfit")
    with pytest.raises(RecipeError, match="concat or pad"):
        load_recipe(str(write_recipe(tmp_path / "b.yaml", bestfit)))
    unknown = _recipe(paths)
    unknown["sources"][0]["weight"] = 1
    with pytest.raises(RecipeError, match="unknown key"):
        load_recipe(str(write_recipe(tmp_path / "c.yaml", unknown)))


# -- properties of the pure functions ------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 300), min_size=1, max_size=40),
    mult_seed=st.integers(0, 2**16),
    max_copies=st.integers(1, 6),
    offset=st.integers(0, 1000),
    row=st.integers(1, 400),
)
def test_order_copies_never_puts_two_copies_in_one_row(
    lengths: list[int], mult_seed: int, max_copies: int, offset: int, row: int
) -> None:
    rng = np.random.default_rng(mult_seed)
    mult = rng.integers(0, max_copies + 1, size=len(lengths))
    lens = np.asarray(lengths)
    order, unplaced = _mix.order_copies(lens, mult, offset, row, [mult_seed])
    assert _mix.rows_sharing_copies(order, lens, offset, row) == 0
    placed = np.bincount(order, minlength=len(lengths)) if len(order) else np.zeros(len(lengths), int)
    assert np.array_equal(placed + unplaced, mult)
    assert np.all(placed[mult > 0] >= 1)  # every chosen document is written at least once
    again, _ = _mix.order_copies(lens, mult, offset, row, [mult_seed])
    assert np.array_equal(order, again)


def test_order_copies_spreads_copies_when_there_is_room() -> None:
    lens = np.full(50, 10)
    mult = np.full(50, 3)
    order, unplaced = _mix.order_copies(lens, mult, 0, 65, [0])
    assert unplaced.sum() == 0 and len(order) == 150
    assert _mix.rows_sharing_copies(order, lens, 0, 65) == 0
    naive = np.repeat(np.arange(50), 3)  # copies side by side: what the rule forbids
    assert _mix.rows_sharing_copies(naive, lens, 0, 65) > 0


@settings(max_examples=200, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 200), min_size=1, max_size=60),
    fraction=st.floats(0.0, 3.5),
    seed=st.integers(0, 1000),
)
def test_multiplicities_meet_the_goal_as_closely_as_whole_documents_allow(
    lengths: list[int], fraction: float, seed: int
) -> None:
    lens = np.asarray(lengths)
    goal = fraction * lens.sum()
    ids = [f"d{i}" for i in range(len(lengths))]
    mult = _mix.multiplicities(lens, _mix.doc_hash(ids, seed), goal)
    got = int((mult * lens).sum())
    assert abs(got - goal) <= lens.max() / 2 + 1e-9
    assert mult.max() - mult.min() <= 1  # whole epochs first, then at most one more copy
    # the choice depends on the ids and the seed, not on the order the documents come in
    perm = np.random.default_rng(seed).permutation(len(lengths))
    mult_p = _mix.multiplicities(lens[perm], _mix.doc_hash([ids[i] for i in perm], seed), goal)
    if len(set(lengths)) == len(lengths):
        assert np.array_equal(mult_p, mult[perm])


def test_plan_targets() -> None:
    t = _mix.plan_targets([100, 1000], [0.5, 0.5], [2.0, 1.0], 0)
    assert t.total == pytest.approx(400.0) and t.short == [0.0, 0.0]
    assert t.planned == pytest.approx([200.0, 200.0])
    fixed = _mix.plan_targets([100, 1000], [0.5, 0.5], [2.0, 1.0], 1000)
    assert fixed.short == pytest.approx([300.0, 0.0]) and fixed.planned == pytest.approx([200.0, 500.0])
    empty = _mix.plan_targets([0, 1000], [0.5, 0.5], [1.0, 1.0], 0)
    # a source without tokens is short of its whole goal; the others set the total
    assert empty.short[0] == pytest.approx(1000.0) and empty.planned == pytest.approx([0.0, 1000.0])


@pytest.mark.e2e
def test_verify_checks_a_mixed_run(mixed_runs: tuple[Path, Path, dict[str, Path]], tmp_path: Path) -> None:
    import shutil

    from dataprep.formats.verify import verify

    one, _, _ = mixed_runs
    assert verify(one) == []
    damaged = tmp_path / "damaged"
    shutil.copytree(one, damaged)
    src = damaged / "shards" / "bin" / "train-00000.src"
    ids = np.fromfile(src, dtype="<i4")
    ids[0] = (ids[0] + 1) % 3
    ids.tofile(src)
    assert any("train-00000.src: sha256 differs" in p for p in verify(damaged))


@pytest.mark.e2e
def test_per_source_stage_overrides(tmp_path: Path) -> None:
    paths = _corpus(tmp_path / "in")
    recipe = _recipe(paths)
    recipe["stages"].insert(0, {"filter_length": {"min_chars": 1}})
    recipe["sources"][1]["stages"] = {"filter_length": {"min_chars": 41}}  # large only
    out = tmp_path / "out"
    _prepare(recipe, out)
    with zstandard.open(out / "rejected" / "filter_length.jsonl.zst", "rt", encoding="utf-8") as f:
        dropped = [json.loads(line) for line in f]
    expected = [d["id"] for d in _docs("l", 600, seed=1) if len(d["text"]) < 41]
    assert sorted(r["id"] for r in dropped) == sorted(expected) and expected
    mix = _manifest(out)["mix"]["sources"]
    assert mix["large"]["docs_available"] == 600 - len(expected)
    assert mix["small"]["docs_available"] == 60 and mix["middle"]["docs_available"] == 250
    from dataprep.recipe import load_recipe
    from dataprep.stage import RecipeError

    recipe["sources"][0]["stages"] = {"exact_dedup": {}}
    with pytest.raises(RecipeError, match="only map stages"):
        load_recipe(str(write_recipe(tmp_path / "bad.yaml", recipe)))


@pytest.mark.e2e
def test_example_recipe_meets_its_shares_on_sample_corpus(tmp_path: Path) -> None:
    """The built-in mix_sample recipe (three sample_corpus/ sources) prepares from the repository
    root without INPUT, and the manifest shows every share met within the tolerance."""
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "dataprep.cli", "prepare", "--recipe", "mix_sample", "--out", str(out)]
    done = subprocess.run([*cmd, "--quiet", "--workers", "2"], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    mix = _manifest(out)["mix"]
    assert list(mix["sources"]) == ["poetry", "reviews", "mail"] and mix["met"]
    for s in mix["sources"].values():
        assert abs(s["achieved_share"] - s["target_share"]) <= 0.005
    assert mix["sources"]["poetry"]["epochs"] > 1 > mix["sources"]["mail"]["epochs"]
    from dataprep.formats.verify import verify

    assert verify(out) == []
