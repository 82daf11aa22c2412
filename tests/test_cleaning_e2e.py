"""The default recipe on sample_corpus/: cleaning shows up in stats.json and report.html."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest

from dataprep.recipe import load_recipe

try:  # tests/ may or may not be a package
    from ._cleaning_helpers import CLEANING
except ImportError:
    from _cleaning_helpers import CLEANING  # type: ignore[no-redef]


@pytest.mark.e2e
@pytest.mark.slow
def test_default_recipe_reports_cleaning(default_sample_out: Path) -> None:
    recipe = load_recipe("default")
    labels = [s.label for s in recipe.stages]
    assert labels[: len(CLEANING)] == CLEANING and labels.index("exact_dedup") == len(CLEANING)
    out = default_sample_out
    stats = json.loads((out / "stats.json").read_text(encoding="utf-8"))
    stages = {s["label"]: s for s in stats["stages"]}
    assert stages["html_to_text"]["counters"]["emails"] > 200
    lang = stages["lang_id"]["counters"]
    assert lang["lang.zh"] > 1000 and lang["lang.en"] > 100 and lang["script.Hant"] > 100  # Tang poems
    assert sum(v for k, v in lang.items() if k.startswith("lang.")) == stages["lang_id"]["docs_in"]
    assert all(r.startswith("lang:") for r in stages["lang_id"]["drops"])
    assert stages["normalize"]["counters"]["opencc_changed"] > 500  # Traditional Tang poems
    assert stages["boilerplate"]["counters"]["lines_removed.prompt"] > 0
    assert stages["pii"]["counters"]["pii.email"] > 0
    assert stages["filter_length"]["drops"]["too_short"] > 0
    for name in CLEANING:
        if name.startswith("filter_"):
            hists = stages[name]["histograms"]
            assert hists and all(sum(h["counts"]) == stages[name]["docs_in"] for h in hists.values())
    report = html.unescape((out / "report.html").read_text(encoding="utf-8"))
    for name in (
        "lang_id: documents per language and script",
        "filter_script: han_share",
        "filter_repetition: top_2gram",
        "filter_garbled: rare_han_share",
    ):
        assert name in report
    assert [s["label"] for s in stats["stages"]][1 : len(CLEANING) + 1] == CLEANING
