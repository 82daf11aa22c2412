"""The cleaning chain of the default recipe decides exactly as when the golden file was frozen:
same final text, same drop stage/reason/score/detail, same filter scores and same stage counters
and histograms, on sample_corpus/, the extra inputs in tests/data/ and their mutants
(see tests/_cleaning_golden.py; refreeze only for an intended change of behaviour)."""

from __future__ import annotations

import pytest

try:  # tests/ may or may not be a package
    from . import _cleaning_golden as golden
except ImportError:
    import _cleaning_golden as golden  # type: ignore[no-redef]


@pytest.fixture(scope="module")
def frozen_and_current() -> tuple[tuple[dict, list], tuple[dict, list]]:
    return golden.read_golden(golden.GOLDEN), golden.run_chain(golden.golden_documents())


def test_golden_covers_every_source_and_decision(frozen_and_current) -> None:
    (_, expected), _ = frozen_and_current
    sources = {r[0].split("/")[0] for r in expected}
    assert {"sample_corpus", "cleaning_golden_inputs.jsonl.gz", "mutant"} <= sources
    assert any(r[0].startswith("sample_corpus/adversarial") for r in expected)
    stages = {r[3].split("/")[0] for r in expected if r[3]}
    assert stages >= {"html_to_text", "normalize", "hostile_content", "boilerplate", "filter_length"}
    assert stages >= {"filter_script", "filter_garbled", "filter_punctuation", "filter_repetition"}


def test_documents_decided_as_frozen(frozen_and_current) -> None:
    (_, expected), (_, actual) = frozen_and_current
    diffs = golden.differences(expected, actual)
    assert not diffs, "cleaning decisions changed:\n" + "\n".join(diffs)


def test_stage_counters_and_histograms_as_frozen(frozen_and_current) -> None:
    (expected, _), (actual, _) = frozen_and_current
    assert list(actual) == list(expected)
    for label in expected:
        assert actual[label] == expected[label], f"{label}: counters or histograms changed"
