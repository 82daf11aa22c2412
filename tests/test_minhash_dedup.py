"""The minhash_dedup stage end to end: clusters, survivor rule, rejected records, stats, report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from dedup_support import kept, real_docs, rejected, run, stage_stats, write_inputs

from dataprep.stage import RecipeError, build_params, get

POEM = real_docs()[0]["text"]  # a Tang poem, Traditional
LONG = (
    "The committee met on Tuesday to review the budget for the coming year and agreed to postpone "
    "the vote on the new library until the public consultation has closed at the end of the month. "
    "Members asked the treasurer to publish the figures before the next meeting."
)


def corpus() -> dict[str, list[dict]]:
    import opencc

    simplified = opencc.OpenCC("t2s").convert(POEM)
    return {
        "a.jsonl": [
            {"id": "poem", "text": POEM},
            {"id": "note", "text": LONG},
            {"id": "unrelated", "text": real_docs()[8]["text"]},
            {"id": "punct", "text": "。。。！！"},
        ],
        "b.jsonl": [
            {"id": "poem-simplified", "text": simplified},  # same length: the earlier one survives
            {"id": "note-longer", "text": LONG + " Thanks."},  # longer: survives
            {"id": "punct-2", "text": "！！。。。"},
            {"id": "note-far", "text": LONG.replace("budget", "weather").replace("library", "bridge")[:120]},
        ],
    }


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("minhash")
    inp = write_inputs(root, corpus())
    stats = run(inp, root / "out", [{"minhash_dedup": {}}])
    return root / "out", stats


@pytest.mark.e2e
def test_near_duplicates_are_dropped_with_cluster_and_survivor(result: tuple[Path, dict]) -> None:
    out, _ = result
    records = {r["id"]: r for r in rejected(out, "minhash_dedup")}
    assert set(records) == {"poem-simplified", "note"}
    poem = records["poem-simplified"]
    assert poem["reason"] == "near_duplicate"
    assert poem["extra"]["survivor"] == "poem"
    assert poem["extra"]["cluster_size"] == 2
    assert poem["extra"]["similarity"] == pytest.approx(1.0)
    assert poem["score"] == poem["extra"]["similarity"]
    note = records["note"]
    assert note["extra"]["survivor"] == "note-longer"  # the longest survives
    assert 0.8 <= note["extra"]["similarity"] < 1.0
    assert note["extra"]["cluster"] != poem["extra"]["cluster"]
    assert "note-longer" in note["detail"]
    ids = [i for i, _ in kept(out)]
    assert ids == ["poem", "unrelated", "punct", "note-longer", "punct-2", "note-far"]


@pytest.mark.e2e
def test_stats_manifest_and_report(result: tuple[Path, dict]) -> None:
    out, stats = result
    s = stage_stats(stats, "minhash_dedup")
    assert s["drops"] == {"near_duplicate": 2}
    assert s["counters"]["clusters"] == 2
    assert s["counters"]["docs_in_clusters"] == 4
    assert s["counters"]["no_shingles"] == 2  # punctuation only: never a duplicate
    hist = s["histograms"]["cluster_size"]
    assert hist["counts"][hist["edges"].index(2) + 1] == 2
    assert len(s["examples"]) == 2
    assert [it["label"].split(":")[0] for it in s["examples"][0]["items"]] == ["kept", "dropped"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["minhash_dedup"]["verify"] == "exact"
    assert manifest["minhash_dedup"]["shingles"]["unicode"]
    b, r = manifest["minhash_dedup"]["bands"], manifest["minhash_dedup"]["rows"]
    assert b * r <= 128
    html = (out / "report.html").read_text()
    assert "Examples: minhash_dedup" in html and "note-longer" in html


@pytest.mark.e2e
@pytest.mark.parametrize("verify", ["signature", "none"])
def test_other_verification_modes_find_the_same_clear_duplicates(tmp_path: Path, verify: str) -> None:
    inp = write_inputs(tmp_path, corpus())
    run(inp, tmp_path / "out", [{"minhash_dedup": {"verify": verify}}])
    assert {r["id"] for r in rejected(tmp_path / "out", "minhash_dedup")} == {"poem-simplified", "note"}


@pytest.mark.e2e
def test_spills_and_decide_files_are_removed_once_applied(tmp_path: Path) -> None:
    inp = write_inputs(tmp_path, corpus())
    run(inp, tmp_path / "out", [{"minhash_dedup": {}}], keep_work=True)
    work = next((tmp_path / "out" / "work" / "stages").glob("*minhash_dedup"))
    left = sorted(p.name for p in work.iterdir())
    assert left and all(name.endswith(".decision.json") for name in left)


@pytest.mark.e2e
def test_verification_rejects_candidates_below_the_threshold(tmp_path: Path) -> None:
    """Bands of one row make every pair of these texts a candidate (P = 1 - (1 - J)^128); exact
    verification keeps only J >= t."""
    rng = np.random.default_rng(0)
    base = real_docs()[9]["text"]
    copies = [{"id": "base", "text": base}]
    for k, rate in enumerate([0.002, 0.2, 0.4]):
        chars = list(base)
        for i in rng.choice(len(chars), int(rate * len(chars)), replace=False):
            chars[i] = "某"
        copies.append({"id": f"edit{k}", "text": "".join(chars)})
    inp = write_inputs(tmp_path, {"a.jsonl": copies})
    stats = run(inp, tmp_path / "out", [{"minhash_dedup": {"bands": 128, "rows": 1}}])
    s = stage_stats(stats, "minhash_dedup")
    assert s["counters"]["pairs_rejected"] >= 1
    assert {r["id"] for r in rejected(tmp_path / "out", "minhash_dedup")} == {"edit0"}


def test_parameters_are_validated() -> None:
    cls = get("minhash_dedup")
    with pytest.raises(RecipeError, match="bands x rows"):
        build_params(cls.Params, {"bands": 20, "rows": 10}, "t")
    with pytest.raises(RecipeError, match="both"):
        build_params(cls.Params, {"bands": 20}, "t")
    with pytest.raises(RecipeError, match="threshold"):
        build_params(cls.Params, {"threshold": 1.5}, "t")
    assert build_params(cls.Params, {}, "t").band_shape() == (16, 8)


@pytest.mark.e2e
def test_clusters_across_scripts_are_counted_and_shown_with_their_differences(tmp_path: Path) -> None:
    """A Traditional copy of a Simplified poem (as lang_id labels them: meta script) is one
    cross-script cluster; the report shows the members side by side, differences marked."""
    poem = real_docs()[8]["text"]
    import opencc

    rows = [
        {"id": "simplified", "text": opencc.OpenCC("t2s").convert(poem), "script": "Hans"},
        {"id": "traditional", "text": opencc.OpenCC("s2t").convert(poem) + "。", "script": "Hant"},
        {"id": "same-script", "text": real_docs()[9]["text"], "script": "Hans"},
        {"id": "same-script-copy", "text": real_docs()[9]["text"] + "！", "script": "Hans"},
    ]
    inp = write_inputs(tmp_path, {"a.jsonl": rows})
    stats = run(inp, tmp_path / "out", [{"minhash_dedup": {}}])
    s = stage_stats(stats, "minhash_dedup")
    assert s["counters"]["clusters"] == 2
    assert s["counters"]["cross_script_clusters"] == 1
    labels = [it["label"] for ex in s["examples"] for it in ex["items"]]
    assert any(label.endswith("(Hant)") for label in labels)
    assert all(ex.get("compare") for ex in s["examples"])
    html = (tmp_path / "out" / "report.html").read_text()
    assert "<mark>" in html


def test_marked_differences_mark_what_differs() -> None:
    from dataprep.report import marked_differences

    assert marked_differences("床前明月光", "床前明月<b>") == (
        "床前明月<mark>光</mark>",
        "床前明月<mark>&lt;b&gt;</mark>",
    )
    assert marked_differences("same", "same") == ("same", "same")
