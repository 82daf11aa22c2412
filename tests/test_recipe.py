"""Recipe validation: every mistake is a RecipeError whose message says what to change."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from conftest import SMALL_RECIPE
from dataprep import recipe as recipe_module
from dataprep.recipe import load_recipe, parse_recipe
from dataprep.stage import MapStage, RecipeError, registry


def variant(**changes: object) -> dict:
    r = json.loads(json.dumps(SMALL_RECIPE))
    r.update(changes)
    return r


@pytest.mark.parametrize(
    ("recipe", "message"),
    [
        (variant(stages=[{"nope": {}}]), "unknown stage 'nope'; known stages:"),
        (
            variant(stages=[{"normalize": {"bogus": 1}}]),
            "unknown parameter(s) bogus; valid: opencc, paragraph_separator",
        ),
        (variant(stages=[{"normalize": {"strip_trailing_space": "yes"}}]), "expected true or false"),
        (variant(stages=[{"pack": {"seq_length": "long"}}]), "expected an integer"),
        (
            variant(stages=[{"normalize": {}}, {"pack": {}}]),
            "stage 'pack' needs tokenizer, which no earlier stage provides (put tokenize before it)",
        ),
        (variant(stages=[{"tokenize": {}}, {"pack": {}}, {"normalize": {}}]), "must come last"),
        (variant(stages=[{"pack": {"tail": "keep"}}]), "is not one of 'pad', 'drop'"),
        (variant(stages={"normalize": {}}), "'stages' must be a list"),
        (variant(input={"on_error": "ignore"}), "is not one of 'skip', 'stop'"),
        (variant(input={"txt_mod": "line"}), "unknown input option(s) txt_mod"),
        (variant(extra=1), "unknown top-level key(s) extra"),
        (variant(stages=[{"jsonl": {}}]), "is a reader, not a pipeline stage"),
        (
            variant(stages=[{"bin": {}}]),
            "'bin' is a shard format, not a pipeline stage (name it in pack.writers)",
        ),
        (variant(stages=[{"tokenize": {"vocab_size": 10}}]), "vocab_size must be at least"),
        (variant(seed="zero"), "seed must be an integer"),
    ],
)
def test_invalid_recipes_are_rejected_with_a_useful_message(recipe: dict, message: str) -> None:
    with pytest.raises(RecipeError) as e:
        parse_recipe(recipe, "r.yaml")
    assert message in str(e.value)
    assert str(e.value).startswith("r.yaml")


def test_defaults_are_resolved_and_hash_is_stable(tmp_path: Path) -> None:
    minimal = {"stages": ["normalize", {"exact_dedup": None}]}
    r = parse_recipe(minimal, "m.yaml")
    resolved = r.resolved()
    assert resolved["stages"][0]["normalize"]["strip_trailing_space"] is True
    assert resolved["input"]["on_error"] == "skip" and resolved["input"]["text_field"] == "text"
    again = parse_recipe(resolved, "resolved")
    assert again.hash() == r.hash()
    assert parse_recipe(minimal, "m.yaml", seed=7).hash() != r.hash()


def test_builtin_default_recipe_loads_and_bad_yaml_is_reported(tmp_path: Path) -> None:
    assert load_recipe("default").name == "default"
    bad = tmp_path / "bad.yaml"
    bad.write_text("stages: [normalize\n")
    with pytest.raises(RecipeError, match="not valid YAML"):
        load_recipe(str(bad))


def test_repeated_stage_gets_a_unique_label() -> None:
    r = parse_recipe({"stages": ["normalize", "normalize"]}, "x")
    assert [s.label for s in r.stages] == ["normalize", "normalize.2"]


MIXED = {
    "sources": [
        {"name": "a", "inputs": ["a/*.jsonl"], "share": 0.5, "stages": {"filter_length": {"min_chars": 3}}},
        {"name": "b", "inputs": ["b/*.jsonl"], "share": 0.5},
    ],
    "stages": [{"filter_length": {"min_chars": 9}}, "tokenize", "filter_length", "pack"],
}


def test_the_recipe_is_resolved_once_into_a_typed_spec_that_travels_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    r = parse_recipe(MIXED, "m.yaml")

    def no_more(*_: object) -> None:
        raise AssertionError("parameters built again after the recipe was resolved")

    monkeypatch.setattr(recipe_module, "build_params", no_more)
    monkeypatch.setattr(registry, "get", no_more)  # readers and stages come resolved
    assert [s.params.min_chars for s in r.stages_for("a") if s.name == "filter_length"] == [3, 3]
    assert [s.params.min_chars for s in r.stages_for("b") if s.name == "filter_length"] == [9, 8]
    assert r.input_params.on_error == "skip" and r.readers["jsonl"].text_field == "text"
    copy = pickle.loads(pickle.dumps(r))  # what a worker receives
    assert copy.hash() == r.hash() and copy.by_source == r.by_source and copy.readers == r.readers
    monkeypatch.undo()
    assert r.reader("jsonl") is r.reader("jsonl")  # one cache of built readers
    assert pickle.loads(pickle.dumps(r))._built_readers == {}


def test_a_stage_declaring_an_unknown_artifact_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    class NeedsNothingKnown(MapStage):
        """A stage that reads an artifact nobody declares."""

        name = "needs_nothing_known"
        uses = ("tokeniser",)

    registry.all_stages()
    monkeypatch.setitem(registry._REGISTRY, NeedsNothingKnown.name, NeedsNothingKnown)
    with pytest.raises(RecipeError, match=r"'needs_nothing_known' declares unknown artifact\(s\) tokeniser"):
        parse_recipe({"stages": ["needs_nothing_known"]}, "r.yaml")


def test_the_mix_is_provided_by_the_recipe_s_sources() -> None:
    r = parse_recipe(MIXED, "m.yaml")
    assert "sources" in registry.get("pack").uses and r.sources
    assert "boilerplate_paragraphs" in registry.get("paragraph_dedup").provides
    assert "boilerplate_paragraphs" in registry.get("minhash_dedup").uses
