"""Recipe validation: every mistake is a RecipeError whose message says what to change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import SMALL_RECIPE
from dataprep.recipe import load_recipe, parse_recipe
from dataprep.stage import RecipeError


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
            "needs tokenizer, which no earlier stage provides",
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
