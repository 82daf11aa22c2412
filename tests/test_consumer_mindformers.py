"""MindFormers reads our MindRecord shards with its own code: ``CausalLanguageModelDataset`` over a
``MindDataset`` data_loader whose ``dataset_dir`` is ``OUT/shards/mindrecord/train``, on its EOD-reset
path (input_ids only; MindFormers builds position_ids and the attention mask from EOS tokens) and on
its compressed-EOD path (input_ids and actual_seq_len).

The two configs are the YAML blocks of docs/use-with-trainers.md (marked
``<!-- test_consumer_mindformers: NAME -->``), loaded with MindFormers' ``MindFormerConfig`` and built
with its ``build_dataset`` as its trainer does, so the page cannot drift from what is tested.

``import mindformers`` (2.0.0) imports every model, which needs ``hyper_parallel``, on no package
index; the dataset modules are imported without running five package ``__init__.py`` files that
only import more modules (see :func:`_import_dataset_modules`). Every module that builds and
iterates the dataset is MindFormers' own, unchanged; nothing is stubbed.

Without mindformers the tests skip; under DATAPREP_REQUIRE_CONSUMERS=1 (set by .ci/run) they fail.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
import sys
import types
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import REPO, SAMPLE, SMALL_RECIPE, run, skip_or_fail

pytestmark = pytest.mark.e2e

MINDFORMERS_VERSION = "2.0.0"
DOC = REPO / "docs" / "use-with-trainers.md"
SEQ_LENGTH = 64
EOD_PAD_LENGTH = 128
# Packages whose __init__.py is not run: `mindformers` and `mindformers.models` import every model
# (hyper_parallel), `mindformers.core` its metrics and callbacks (jieba, nltk, rouge_chinese,
# tensorboardX), `mindformers.dataset` and its `dataloader` every loader (Hugging Face `datasets`).
SKIPPED_INITS = (
    "mindformers",
    "mindformers.core",
    "mindformers.models",
    "mindformers.dataset",
    "mindformers.dataset.dataloader",
)


def _import_dataset_modules() -> dict[str, Any]:
    """MindFormers' config loader, dataset builder and compressed-EOD reference function.

    The packages of SKIPPED_INITS are entered in sys.modules as empty packages with their real
    directory as ``__path__`` (what their ``__init__.py`` would give, minus its imports), so that
    importing a submodule runs that submodule's own code and the imports it makes itself."""
    if importlib.util.find_spec("mindformers") is None:
        skip_or_fail("mindformers is not installed (`make setup` installs it)", "DATAPREP_REQUIRE_CONSUMERS")
    version = importlib.metadata.version("mindformers")
    assert version == MINDFORMERS_VERSION, f"mindformers {version} installed; these tests read 2.0.0's code"
    if "mindformers" not in sys.modules:
        spec = importlib.util.find_spec("mindformers")
        assert spec is not None and spec.submodule_search_locations
        root = Path(next(iter(spec.submodule_search_locations)))
        for name in SKIPPED_INITS:
            directory = root.joinpath(*name.split(".")[1:])
            package = types.ModuleType(name)
            package.__path__ = [str(directory)]
            package.__file__ = str(directory / "__init__.py")
            package.__spec__ = importlib.util.spec_from_file_location(
                name, package.__file__, submodule_search_locations=[str(directory)]
            )
            sys.modules[name] = package
            parent, _, child = name.rpartition(".")
            if parent:
                setattr(sys.modules[parent], child, package)
        sys.modules["mindformers"].__version__ = version  # the one line of its __init__ others import
    importlib.import_module("mindformers.dataset.causal_language_model_dataset")  # registers the dataset
    from mindformers.dataset.blended_datasets.gpt_dataset import _get_eod_attention_mask
    from mindformers.dataset.build_dataset import build_dataset
    from mindformers.tools.register import MindFormerConfig

    return {
        "MindFormerConfig": MindFormerConfig,
        "build_dataset": build_dataset,
        "eod_attention_mask": _get_eod_attention_mask,
    }


@pytest.fixture(scope="module")
def mindformers(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """MindFormers' dataset modules, imported with its log directory (./output/log by default)
    moved into a temporary directory."""
    logs = tmp_path_factory.mktemp("mindformers_logs")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCAL_DEFAULT_PATH", str(logs))
        mp.setenv("LOG_MF_PATH", str(logs / "log"))
        yield _import_dataset_modules()


def _corpus(path: Path) -> Path:
    """~480 documents from the sample reviews: most of 2-60 characters (several per 64-token row),
    every 40th 150-500 characters long (over several rows)."""
    lines = [x for x in (SAMPLE / "reviews" / "reviews.txt").read_text(encoding="utf-8").splitlines() if x]
    short = (2, 5, 9, 14, 20, 30, 45, 60)
    rows = []
    for i, line in enumerate(lines[:480]):
        text = (line * 8)[: 150 + 7 * (i % 50)] if i % 40 == 0 else line[: short[i % len(short)]]
        rows.append({"id": f"r{i}", "text": text})
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """OUT of a prepare run: concat packing into 64-token rows, a tenth of the documents in validation."""
    base = tmp_path_factory.mktemp("mindformers_consumer")
    recipe = json.loads(json.dumps(SMALL_RECIPE))
    recipe["stages"][-1] = {"pack": {"seq_length": SEQ_LENGTH, "validation_fraction": 0.1}}
    out = base / "out"
    run([_corpus(base / "reviews.jsonl")], out, recipe)
    return out


def _manifest_rows(out: Path) -> dict[str, list[tuple[np.ndarray, np.ndarray]]]:
    """Per split, every row as (input_ids, seg_ends), read by dataprep's own MindRecord reader."""
    from dataprep.formats.manifest import read_manifest
    from dataprep.formats.mindrecord import read_rows

    _, manifest = read_manifest(out)
    assert manifest.shards is not None
    rows: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for split, listed in manifest.shards.splits.items():
        rows[split] = [
            (r["input_ids"], r["seg_ends"])
            for entry in manifest.split_files(out, split, "mindrecord")
            for r in read_rows(out / entry.path)
        ]
        assert len(rows[split]) == listed.rows, split
    return rows


def _doc_config(name: str, out: Path, tmp: Path, mindformers: Any, **dataset_changes: Any) -> Any:
    """The YAML block ``name`` of docs/use-with-trainers.md with its ``dataset_dir`` moved from
    ``out/`` into ``out``, loaded by MindFormers' ``MindFormerConfig`` from a file."""
    text = DOC.read_text(encoding="utf-8")
    found = re.search(rf"<!-- test_consumer_mindformers: {name} -->\n```yaml\n(.*?)```", text, re.S)
    assert found, f"{DOC.name} has no YAML block marked {name}"
    block = found.group(1)
    assert block.count('dataset_dir: "out/shards/mindrecord/train"') == 1
    block = block.replace('"out/shards/mindrecord/train"', json.dumps(str(out / "shards/mindrecord/train")))
    path = tmp / f"{name}.yaml"
    path.write_text(f"run_mode: 'train'\n{block}", encoding="utf-8")  # the rest of a pretrain YAML
    config = mindformers["MindFormerConfig"](str(path))
    for key, value in dataset_changes.items():
        config.train_dataset_task.dataset_config[key] = value
    return config


def _batches(config: Any, mindformers: Any) -> list[dict[str, np.ndarray]]:
    dataset = mindformers["build_dataset"](config.train_dataset_task)
    return list(dataset.create_dict_iterator(num_epochs=1, output_numpy=True))


def _starts(seg_ends: np.ndarray) -> np.ndarray:
    """Where the documents of a row start inside the model's input (its first SEQ_LENGTH tokens)."""
    return np.concatenate([[0], seg_ends[seg_ends < SEQ_LENGTH]]).astype(np.int64)


def _expected_position_ids_and_mask(seg_ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions restarting at every document start; causal attention within a document only."""
    starts = _starts(seg_ends)
    doc_of = np.searchsorted(starts, np.arange(SEQ_LENGTH), side="right") - 1
    positions = np.arange(SEQ_LENGTH) - starts[doc_of]
    causal = np.tril(np.ones((SEQ_LENGTH, SEQ_LENGTH), dtype=bool))
    return positions, causal & (doc_of[:, None] == doc_of[None, :])


def _match_rows(
    got_ids: list[np.ndarray], ours: list[tuple[np.ndarray, np.ndarray]]
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Ours (input_ids, seg_ends) for each row MindFormers gave, in its (shuffled) order; asserts
    that it gave every one of our rows exactly once and nothing else."""
    by_tokens: dict[bytes, list[tuple[np.ndarray, np.ndarray]]] = {}
    for ids, ends in ours:
        by_tokens.setdefault(np.asarray(ids, np.int32).tobytes(), []).append((ids, ends))
    keys = [np.asarray(ids, np.int32).tobytes() for ids in got_ids]
    assert Counter(keys) == Counter({k: len(v) for k, v in by_tokens.items()})
    return [by_tokens[k][0] for k in keys]


def test_eod_reset_reads_every_train_row_with_boundaries_at_document_ends(
    mindformers: Any, prepared: Path, tmp_path: Path
) -> None:
    rows = _manifest_rows(prepared)
    manifest = json.loads((prepared / "manifest.json").read_text(encoding="utf-8"))
    config = _doc_config("eod_reset", prepared, tmp_path, mindformers)
    assert config.train_dataset_task.dataset_config.eod_token_id == manifest["shards"]["eos_id"]
    assert rows["validation"], "the run put no row in validation: the test would not show none is read"
    batches = _batches(config, mindformers)
    for b in batches:
        assert sorted(b) == ["attention_mask", "input_ids", "position_ids"]
        assert b["input_ids"].shape == (1, SEQ_LENGTH + 1) and b["input_ids"].dtype == np.int32
        assert b["position_ids"].shape == (1, SEQ_LENGTH)
        assert b["attention_mask"].shape == (1, SEQ_LENGTH, SEQ_LENGTH)
    ours = _match_rows([b["input_ids"][0] for b in batches], rows["train"])
    assert len(batches) == manifest["shards"]["splits"]["train"]["rows"]
    restarts = 0
    for b, (_, seg_ends) in zip(batches, ours, strict=True):
        positions, mask = _expected_position_ids_and_mask(seg_ends)
        np.testing.assert_array_equal(b["position_ids"][0], positions)
        np.testing.assert_array_equal(b["attention_mask"][0].astype(bool), mask)
        restarts += len(_starts(seg_ends)) - 1
    assert restarts > len(batches)  # most rows hold several documents: the boundaries were exercised


def test_compressed_eod_reads_actual_seq_len_as_mindformers_computes_it(
    mindformers: Any, prepared: Path, tmp_path: Path
) -> None:
    rows = _manifest_rows(prepared)
    manifest = json.loads((prepared / "manifest.json").read_text(encoding="utf-8"))
    eos_id = manifest["shards"]["eos_id"]
    batches = _batches(_doc_config("compressed_eod", prepared, tmp_path, mindformers), mindformers)
    for b in batches:
        assert sorted(b) == ["actual_seq_len", "input_ids"]
        assert b["input_ids"].shape == (1, SEQ_LENGTH + 1) and b["input_ids"].dtype == np.int32
        assert b["actual_seq_len"].shape == (1, EOD_PAD_LENGTH) and b["actual_seq_len"].dtype == np.int32
    ours = _match_rows([b["input_ids"][0] for b in batches], rows["train"])
    assert len(batches) == manifest["shards"]["splits"]["train"]["rows"]
    for b, (ids, seg_ends) in zip(batches, ours, strict=True):
        inside = seg_ends[seg_ends < SEQ_LENGTH]
        expected = np.full(EOD_PAD_LENGTH, SEQ_LENGTH, np.int32)
        expected[: len(inside)] = inside
        np.testing.assert_array_equal(b["actual_seq_len"][0], expected)
        reference = mindformers["eod_attention_mask"](np.array(ids[:-1]), eos_id, EOD_PAD_LENGTH)
        np.testing.assert_array_equal(b["actual_seq_len"][0], reference)


def test_compressed_eod_batches_of_two_rows_are_not_offset_by_mindformers(
    mindformers: Any, prepared: Path, tmp_path: Path
) -> None:
    """Why the page keeps batch_size 1 on the compressed-EOD path: with a MindDataset loader,
    CausalLanguageModelDataset batches actual_seq_len as stored (no per-row offset), so the second
    row's ends stay relative to its own start."""
    rows = _manifest_rows(prepared)
    config = _doc_config("compressed_eod", prepared, tmp_path, mindformers, batch_size=2)
    config.train_dataset_task.dataset_config.data_loader.shuffle = False
    first = _batches(config, mindformers)[0]
    assert first["actual_seq_len"].shape == (2, EOD_PAD_LENGTH)
    for k in range(2):
        ids, seg_ends = rows["train"][k]
        np.testing.assert_array_equal(first["input_ids"][k], ids)
        inside = seg_ends[seg_ends < SEQ_LENGTH]
        np.testing.assert_array_equal(first["actual_seq_len"][k][: len(inside)], inside)
        assert (first["actual_seq_len"][k][len(inside) :] == SEQ_LENGTH).all()
