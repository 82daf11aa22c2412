"""MindRecord's writer imported alone (as the pool workers do) writes the very bytes of the full
MindSpore import, loads none of MindSpore's training modules nor its core extension, and steps
aside when MindSpore is already imported."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

WRITE = """
import json, sys
from pathlib import Path
import numpy as np
from dataprep.formats import mindrecord_shards
from dataprep.formats.mindrecord import MindRecordFile
from dataprep.formats.rows import RowBatch
alone = mindrecord_shards.import_mindrecord_alone() if sys.argv[2] == "alone" else False
if not alone:
    import mindspore.mindrecord
rng = np.random.default_rng(0)
f = MindRecordFile(Path(sys.argv[1]), with_loss_mask=False)
for _ in range(3):
    tokens = rng.integers(0, 50000, size=(64, 33)).astype(np.int32)
    f.write(RowBatch(tokens, np.tile(np.array([10, 33], np.int32), 64), np.full(64, 2, np.int32)))
f.commit()
again = mindrecord_shards.import_mindrecord_alone()
core = sys.modules.get("mindspore._c_expression")
print(json.dumps({"alone": alone, "nn": "mindspore.nn" in sys.modules, "again": again,
                  "core": hasattr(core, "__file__")}))
"""


def _write(path: Path, mode: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", WRITE, str(path), mode],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_writer_imported_alone_writes_the_same_bytes(tmp_path: Path) -> None:
    (tmp_path / "alone").mkdir()
    (tmp_path / "full").mkdir()
    alone = _write(tmp_path / "alone" / "x.mindrecord", "alone")
    full = _write(tmp_path / "full" / "x.mindrecord", "full")
    # alone: MindSpore's core extension (its ~200 MB of libraries) is not loaded, only a stub
    assert alone == {"alone": True, "nn": False, "again": True, "core": False}
    # with MindSpore imported in full, the bare import steps aside
    assert full == {"alone": False, "nn": True, "again": False, "core": True}
    for name in ("x.mindrecord", "x.mindrecord.db"):
        assert _sha(tmp_path / "alone" / name) == _sha(tmp_path / "full" / name)


PREPARE = """
import json, sys
from dataprep.cli import main
corpus, out, recipe = sys.argv[1:]
rc = main(["prepare", corpus, "--out", out, "--recipe", recipe, "--workers", "1", "--quiet"])
core = sys.modules.get("mindspore._c_expression")
seen = {k: m in sys.modules for k, m in {"writer": "mindspore.mindrecord", "nn": "mindspore.nn"}.items()}
print(json.dumps({"rc": rc, **seen, "core": hasattr(core, "__file__")}))
"""


@pytest.mark.e2e
def test_the_prepare_command_writes_its_files_with_the_writer_imported_alone(tmp_path: Path) -> None:
    """`dataprep prepare` at one worker writes MindRecord in its own process: with the writer
    alone, not all of MindSpore (~1.3 CPU-s and ~350 MB less)."""
    from tests.conftest import SMALL_RECIPE, write_recipe

    corpus = tmp_path / "c.jsonl"
    poem = "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。"
    rows = [{"text": f"第{i}篇：{poem}编号{i * 7919 % 1000}。"} for i in range(300)]
    corpus.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    recipe = write_recipe(tmp_path / "r.yaml", SMALL_RECIPE)
    out = subprocess.run(
        [sys.executable, "-c", PREPARE, str(corpus), str(tmp_path / "out"), str(recipe)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=True,
    )
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen == {"rc": 0, "writer": True, "nn": False, "core": False}
    assert list((tmp_path / "out" / "shards" / "mindrecord" / "train").glob("*.mindrecord"))
