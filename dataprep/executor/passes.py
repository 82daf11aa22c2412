"""How a recipe is cut into passes, and where a run keeps its files inside OUT.

A recipe's stage list is cut into *passes* at every global stage that needs the whole corpus
(:func:`plan_passes`); :class:`RunDir` names every path a run reads or writes (documents between
passes, completion markers, rejected documents, decisions, stage work directories).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dataprep.docstore import FRAMES_SUFFIX, PARQUET_SUFFIX
from dataprep.stage.protocol import GlobalStage, Stage

READ_LABEL = "read"
IO_CPU = "(read, parse, write documents)"  # a task's CPU seconds outside its stages
COMPLETE = "complete.json"  # in OUT/work once the outputs are in place
OUTPUTS_RECORD = "outputs.json"  # in OUT/work: the entries of OUT a run put there (before moving them)
DECIDE_TASK = "decide"  # names a pass's rejected/ directory for the documents its decide drops
OUTPUT_ENTRIES = (
    "manifest.json",
    "stats.json",
    "report.html",
    "recipe.yaml",
    "timings.json",
    "rejected",
    "shards",
    "tokenizer",
    "documents",
)


@dataclass
class Pass:
    """One pass over the corpus. apply: a global stage whose ``apply`` runs first; maps: stages run
    per batch (map stages, and global stages that need no global pass); compute: a global stage
    whose ``compute`` ends the pass (its ``decide`` follows the pass)."""

    index: int
    apply: int | None
    maps: list[int]
    compute: int | None


def plan_passes(stages: list[Stage]) -> list[Pass]:
    passes: list[Pass] = []
    current = Pass(0, None, [], None)
    for i, st in enumerate(stages):
        if isinstance(st, GlobalStage) and st.needs_global_pass():
            current.compute = i
            passes.append(current)
            if st.terminal:
                return passes
            current = Pass(len(passes), i, [], None)
        else:
            current.maps.append(i)
    passes.append(current)
    return passes


class RunDir:
    """Paths inside OUT."""

    def __init__(self, out: Path):
        self.out = out
        self.work = out / "work"
        self.final = out / ".final"
        self.output = self.work / "output"  # global stages write final files here

    def pass_dir(self, p: int) -> Path:
        return self.work / f"pass{p}"

    def docs(self, p: int, task_id: str, final: bool = False) -> Path:
        """A task's documents after pass p: Parquet when they become outputs (``final``), else
        frames, cheaper to write and read (see :mod:`dataprep.docstore`)."""
        suffix = PARQUET_SUFFIX if final else FRAMES_SUFFIX
        return self.pass_dir(p) / "docs" / f"{task_id}{suffix}"

    def marker(self, p: int, task_id: str) -> Path:
        return self.pass_dir(p) / "done" / f"{task_id}.json"

    def input_hashes(self, task_id: str) -> Path:
        """[path, start, end, sha256] of every input byte range the pass-0 task read (JSON)."""
        return self.pass_dir(0) / "inputs" / f"{task_id}.json"

    def changed(self, task_id: str) -> Path:
        """Written by a task that found an input changed since it was planned: the next run
        starts over (with --overwrite) instead of resuming."""
        return self.work / "changed" / f"{task_id}.json"

    def rejected(self, p: int, task_id: str) -> Path:
        return self.pass_dir(p) / "rejected" / task_id

    def decided(self, p: int) -> Path:
        return self.pass_dir(p) / "decided.json"

    def stage_dir(self, index: int, label: str) -> Path:
        return self.work / "stages" / f"{index:02d}-{label}"
