"""Artifacts: what one stage (or the run) publishes for later stages, by name.

A stage declares the artifacts it reads and writes: ``requires`` (it cannot run without them),
``uses`` (it reads them when an earlier stage provides them, e.g. minhash_dedup's boilerplate
paragraphs) and ``provides`` (it publishes them in ``decide`` or ``setup``, with
:meth:`dataprep.stage.context.DriverContext.publish`). The recipe loader refuses a recipe whose
stage requires an artifact that no earlier stage provides, naming both, and a stage that declares
an artifact not listed here. Values are JSON (they are saved in OUT/work/artifacts.json and read
by the workers as ``ctx.artifacts[name]``); their types below state the keys readers rely on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict


class TokenizerArtifact(TypedDict, total=False):
    """``tokenizer``: the run's tokenizer, trained or given (published by tokenize)."""

    local_path: str  # the tokenizer file in the run's staging directory
    examples_dir: str  # tokenize's work directory
    file: str  # its path inside OUT
    kind: str  # "hf" (tokenizer.json) or "sentencepiece"
    sha256: str  # of the tokenizer file
    size: int  # token ids in use
    vocab_size: int  # the model's vocabulary (at least size)
    eos_id: int
    eos_token: str
    pad_id: int | None
    bos_id: int | None
    unk_id: int | None
    hf: dict[str, Any]  # the Hugging Face files beside it


class SourcesArtifact(TypedDict):
    """``sources``: the mix of a recipe with ``sources:``, seeded by the run before the first pass
    (read by pack, which mixes by it). ``sources``: each source's ``SourceSpec.to_json()`` in
    recipe order (its position is its source id); ``mix``: the recipe's ``mix:`` parameters."""

    sources: list[dict[str, Any]]
    mix: dict[str, Any]


class BoilerplateArtifact(TypedDict):
    """``boilerplate_paragraphs``: the paragraphs repeated across the corpus (published by
    paragraph_dedup; minhash_dedup leaves them out of what it hashes)."""

    path: str  # the key set's file (para.BoilerplateSet)
    unit: str  # how the text was cut into paragraphs
    min_chars: int  # shorter paragraphs were not counted
    count: int  # paragraphs in the set


@dataclass(frozen=True)
class Artifact:
    """One artifact: its name, what it holds (its type) and whether the run itself provides it
    (``by_run``: the recipe's ``sources:`` rather than a stage)."""

    name: str
    type: type
    by_run: bool = False


ARTIFACTS: dict[str, Artifact] = {
    a.name: a
    for a in (
        Artifact("tokenizer", TokenizerArtifact),
        Artifact("sources", SourcesArtifact, by_run=True),
        Artifact("boilerplate_paragraphs", BoilerplateArtifact),
    )
}


def check_declarations(stage: type, where: str) -> str | None:
    """What is wrong with ``stage``'s artifact declarations (an artifact not in ARTIFACTS), or None."""
    declared = [*stage.requires, *getattr(stage, "uses", ()), *stage.provides]
    unknown = [name for name in declared if name not in ARTIFACTS]
    if not unknown:
        return None
    return (
        f"{where}: stage {stage.name!r} declares unknown artifact(s) {', '.join(unknown)} "
        f"(known: {', '.join(sorted(ARTIFACTS))})"
    )
