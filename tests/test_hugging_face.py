"""Hugging Face as a consumer of a run's outputs, checked with transformers' and datasets' own code:

* ``AutoTokenizer.from_pretrained(OUT/tokenizer)`` of a trained tokenizer (byte-level BPE and a
  SentencePiece BPE model) has the manifest's eos / pad / bos / unk ids and encodes every
  document of OUT/documents to the ids the shards hold for it; a SentencePiece unigram model
  too, but where two segmentations score the same, tokenizers' Unigram may pick the other one;
* ``output: {documents: true}`` writes exactly the documents the shards hold, once each (a
  dropped tail and a mix's unchosen documents left out), listed in the manifest with their
  sha256, the same bytes with 1 and 2 workers, and ``datasets.load_dataset("parquet")`` reads them;
* a supplied tokenizer keeps its own Hugging Face files, as they are, and none is invented.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dataprep.executor import prepare
from dataprep.formats.bin_shards import iter_bin_file
from dataprep.formats.verify import verify
from dataprep.recipe import RecipeError, load_recipe, parse_recipe
from stages.pack import split_of

pytestmark = pytest.mark.e2e  # every case prepares or reads a prepared output

ROOT = Path(__file__).resolve().parent.parent
INPUTS = [str(ROOT / "sample_corpus" / "reviews"), str(ROOT / "sample_corpus" / "poetry")]
FRACTION = 0.05


def recipe(kind: str, tokenizer: str = "train", documents: bool = True) -> Any:
    return parse_recipe(
        {
            "name": f"hf_{kind}",
            "output": {"documents": documents},
            "stages": [
                {"normalize": {}},
                {"filter_length": {"min_chars": 8}},
                {"exact_dedup": {}},
                {
                    "tokenize": {
                        "tokenizer": tokenizer,
                        "kind": kind,
                        "vocab_size": 4096,
                        "train_sample_bytes": 1 << 20,
                    }
                },
                # unshuffled concat: the shards' rows are the stream of each split in order; the
                # dropped tail rejects the document whose EOS it held
                {
                    "pack": {
                        "seq_length": 64,
                        "tail": "drop",
                        "shuffle": False,
                        "validation_fraction": FRACTION,
                        "writers": ["bin"],
                    }
                },
            ],
        },
        f"hf_{kind}.yaml",
    )


def run(out: Path, kind: str, workers: int = 2, **kw: Any) -> dict[str, Any]:
    prepare(INPUTS, out, recipe(kind, **kw), workers=workers, quiet=True)
    return json.loads((out / "manifest.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, Any]]]:
    base = tmp_path_factory.mktemp("hf")
    return {kind: (base / kind, run(base / kind, kind)) for kind in ("bytebpe", "bpe", "unigram")}


def documents(out: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = []
    for path in sorted((out / "documents").glob("*.parquet")):
        rows += pq.read_table(path).to_pylist()
    return rows


def rejected(out: Path) -> list[dict[str, Any]]:
    from dataprep.docstore import read_rejected

    return list(read_rejected(out / "rejected" / "pack.jsonl.zst"))


def shard_documents(out: Path, manifest: dict[str, Any], split: str) -> list[list[int]]:
    """The ids of every complete document (ending with its EOS) in ``split``'s shards, in order
    (concat under tail: drop has no padding: the rows are the stream)."""
    shards = manifest["shards"]
    rows = [
        batch.tokens.reshape(-1)
        for entry in shards["splits"][split]["files"]
        for batch in iter_bin_file(
            out / entry["path"], out / entry["index"]["path"], shards["dtype"], shards["row_length"]
        )
    ]
    flat = np.concatenate(rows).astype(np.int64) if rows else np.zeros(0, np.int64)
    ends = np.flatnonzero(flat == shards["eos_id"])
    starts = np.concatenate([[0], ends[:-1] + 1]) if len(ends) else ends
    return [flat[a:b].tolist() for a, b in zip(starts, ends, strict=True)]


def auto_tokenizer_with_the_manifest_ids(out: Path, tok: dict[str, Any]) -> Any:
    """transformers' AutoTokenizer of OUT/tokenizer, checked to have the manifest's special ids."""
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(out / "tokenizer"))
    assert (hf.eos_token_id, hf.pad_token_id, hf.bos_token_id, hf.unk_token_id) == (
        tok["eos_id"],
        tok["pad_id"],
        tok["bos_id"],
        tok["unk_id"],
    )
    return hf


@pytest.mark.parametrize("kind", ["bytebpe", "bpe"])
def test_auto_tokenizer_has_the_manifest_special_ids_and_encodes_documents_to_the_shard_ids(
    runs: dict[str, tuple[Path, dict[str, Any]]], kind: str
) -> None:
    out, manifest = runs[kind]
    tok = manifest["tokenizer"]
    hf = auto_tokenizer_with_the_manifest_ids(out, tok)
    assert None not in (hf.eos_token_id, hf.pad_token_id, hf.bos_token_id, hf.unk_token_id)
    assert hf.model_max_length == manifest["shards"]["seq_length"] == tok["hf"]["model_max_length"]
    assert tok["hf"]["files"] == ["tokenizer_config.json", "special_tokens_map.json"]
    docs = documents(out)
    assert len(docs) == manifest["documents"]["kept"] > 100
    for split in ("train", "validation"):
        in_split = [d for d in docs if split_of(d["id"], FRACTION) == split]
        encoded = hf([d["text"] for d in in_split])["input_ids"]
        assert encoded == shard_documents(out, manifest, split) == [d["tokens"] for d in in_split]
        assert [hf.decode(ids) for ids in encoded] == [d["text"] for d in in_split]


def test_a_unigram_model_differs_only_where_two_segmentations_tie(
    runs: dict[str, tuple[Path, dict[str, Any]]],
) -> None:
    """tokenizers' Unigram breaks ties between equally scored segmentations otherwise than
    sentencepiece (e.g. "...." as "." + "..." or "..." + "."): on this run 1 document of 6,502."""
    out, manifest = runs["unigram"]
    tok = manifest["tokenizer"]
    hf = auto_tokenizer_with_the_manifest_ids(out, tok)
    docs = documents(out)
    encoded = hf([d["text"] for d in docs])["input_ids"]
    differ = [(d, ids) for d, ids in zip(docs, encoded, strict=True) if ids != d["tokens"]]
    assert len(differ) <= len(docs) // 1000
    for d, ids in differ:
        assert len(ids) == len(d["tokens"]) and sorted(ids) == sorted(d["tokens"])
    assert [hf.decode(ids) for ids in encoded] == [d["text"] for d in docs]


def test_documents_are_exactly_those_in_the_shards_listed_and_readable_by_datasets(
    runs: dict[str, tuple[Path, dict[str, Any]]], tmp_path: Path
) -> None:
    import datasets

    out, manifest = runs["bytebpe"]
    files = manifest["documents"]["files"]
    assert [f["path"] for f in files] == sorted(
        f"documents/{p.name}" for p in (out / "documents").glob("*.parquet")
    )
    for f in files:
        data = (out / f["path"]).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (f["bytes"], f["sha256"])
    splits = manifest["shards"]["splits"]
    in_shards = sum(s["documents"] - s["dropped"]["eos"] for s in splits.values())
    tail = [r for r in rejected(out) if r["reason"] == "tail_dropped"]
    assert len(tail) == sum(s["dropped"]["eos"] for s in splits.values()) > 0  # the dropped tails' ...
    docs = documents(out)
    assert sum(f["rows"] for f in files) == len(docs) == in_shards == manifest["documents"]["kept"]
    keys = {(d["source"], d["id"]) for d in docs}
    assert len(keys) == len(docs)
    assert not keys & {(r["source"], r["id"]) for r in tail}  # ... documents are not kept
    ds = datasets.load_dataset(
        "parquet",
        data_files=[str(out / f["path"]) for f in files],
        split="train",
        cache_dir=str(tmp_path / "cache"),
    )
    assert ds.num_rows == manifest["documents"]["kept"]
    assert ds.column_names == ["id", "text", "source", "meta", "tokens"]
    assert ds[0]["text"] == docs[0]["text"]


def test_documents_are_the_same_bytes_with_one_and_two_workers_and_verified(
    runs: dict[str, tuple[Path, dict[str, Any]]], tmp_path: Path
) -> None:
    out, manifest = runs["bytebpe"]
    one = run(tmp_path / "one", "bytebpe", workers=1)
    assert one["documents"] == manifest["documents"]
    for f in manifest["documents"]["files"]:
        assert (tmp_path / "one" / f["path"]).read_bytes() == (out / f["path"]).read_bytes()
    assert verify(tmp_path / "one") == []
    first = tmp_path / "one" / manifest["documents"]["files"][0]["path"]
    first.write_bytes(first.read_bytes()[:-1] + b"!")
    assert any("sha256 differs" in p and first.name in p for p in verify(tmp_path / "one"))


def test_without_the_option_no_documents_are_written_beside_the_shards(tmp_path: Path) -> None:
    manifest = run(tmp_path / "out", "bytebpe", documents=False)
    assert not (tmp_path / "out" / "documents").exists()
    assert "files" not in manifest["documents"]
    with pytest.raises(RecipeError, match="output"):
        parse_recipe({"output": {"documents": "yes"}, "stages": []}, "bad.yaml")
    with pytest.raises(RecipeError, match="unknown"):
        parse_recipe({"output": {"docs": True}, "stages": []}, "bad.yaml")


def test_a_mix_writes_each_chosen_document_once_and_none_it_left_out(tmp_path: Path) -> None:
    mix = load_recipe("mix_sample")
    mix.output.documents = True
    out = tmp_path / "out"
    stats = prepare([], out, mix, workers=2, quiet=True)
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    sources = manifest["mix"]["sources"]
    docs = documents(out)
    kept = {(d["source"], d["id"]) for d in docs}
    assert len(kept) == len(docs) == stats["totals"]["kept"] == manifest["documents"]["kept"]
    assert stats["totals"]["dropped_by_reason"].get("pack/mix_not_chosen", 0) > 0
    validation = manifest["shards"]["splits"]["validation"]["documents"]
    assert len(docs) == sum(s["docs_kept"] for s in sources.values()) + validation
    unchosen = [r for r in rejected(out) if r["reason"] == "mix_not_chosen"]
    assert unchosen and not kept & {(r["source"], r["id"]) for r in unchosen}


def test_a_supplied_tokenizer_keeps_its_own_files_and_gets_none_invented(
    runs: dict[str, tuple[Path, dict[str, Any]]], tmp_path: Path
) -> None:
    trained = runs["bytebpe"][0] / "tokenizer"
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copyfile(trained / "tokenizer.json", bare / "tokenizer.json")
    manifest = run(tmp_path / "out_bare", "bytebpe", tokenizer=str(bare), documents=False)
    assert manifest["tokenizer"]["hf"] == {
        "files": [],
        "missing": ["tokenizer_config.json", "special_tokens_map.json"],
    }
    assert sorted(p.name for p in (tmp_path / "out_bare" / "tokenizer").iterdir()) == ["tokenizer.json"]
    own = tmp_path / "own"
    own.mkdir()
    shutil.copyfile(trained / "tokenizer.json", own / "tokenizer.json")
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "</s>", "model_max_length": 7}
    (own / "tokenizer_config.json").write_text(json.dumps(config))
    manifest = run(tmp_path / "out_own", "bytebpe", tokenizer=str(own), documents=False)
    assert manifest["tokenizer"]["hf"]["files"] == ["tokenizer_config.json"]
    copied = tmp_path / "out_own" / "tokenizer" / "tokenizer_config.json"
    assert copied.read_bytes() == (own / "tokenizer_config.json").read_bytes()
