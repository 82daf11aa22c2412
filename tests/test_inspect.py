"""`dataprep inspect shard`: decoded rows with boundaries and EOS visible, stats, on .bin and MindRecord."""

from __future__ import annotations

import json

import pytest
from test_shards_support import corpus_texts, run_prepare, small_tokenizer, write_corpus

from dataprep.cli import main

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    base = tmp_path_factory.mktemp("inspect")
    texts = corpus_texts(30, 30)
    corpus = write_corpus(base / "corpus", texts)
    tok = small_tokenizer(base / "tok", texts)
    out = base / "out"
    stages = [
        {"tokenize": {"tokenizer": str(tok)}},
        {"pack": {"seq_length": 64, "shuffle": False, "shards": 1}},
    ]
    manifest = run_prepare(corpus, out, stages)
    return out, texts, manifest


def test_text_output_shows_documents_and_eos(run, capsys):
    out, texts, manifest = run
    assert main(["inspect", "shard", str(out), "--rows", "8"]) == 0
    text = capsys.readouterr().out
    assert "⟨EOS⟩" in text and "actual_seq_len" in text
    assert texts[0][:10] in text  # unshuffled: the first row starts with the first document
    train = manifest["shards"]["splits"]["train"]
    assert f"rows {train['rows']:,}" in text and f"EOS {train['eos_tokens']:,}" in text


@pytest.mark.parametrize("fmt", ["bin", "mindrecord"])
def test_json_output_per_format(run, capsys, fmt):
    out, _, manifest = run
    entry = next(f for f in manifest["shards"]["splits"]["train"]["files"] if f["format"] == fmt)
    assert main(["inspect", "shard", str(out / entry["path"]), "--row", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["shard"]["rows"] == entry["rows"] and data["shard"]["format"] == fmt
    assert data["shard"]["real_tokens"] == entry["tokens"]
    (row,) = data["rows"]
    assert row["row"] == 1 and row["actual_seq_len"][-1] == row["real_tokens"]
    assert all("text" in seg for seg in row["segments"])


def test_bad_row_and_bad_path_are_usage_errors(run, capsys, tmp_path):
    out, _, manifest = run
    rows = manifest["shards"]["splits"]["train"]["rows"]
    assert main(["inspect", "shard", str(out), "--row", str(rows + 5)]) == 2
    assert "out of range" in capsys.readouterr().err
    assert main(["inspect", "shard", str(tmp_path / "nope.bin")]) == 2


@pytest.mark.parametrize("fmt", ["bin", "mindrecord"])
def test_a_directory_inside_out_shows_its_own_files(run, capsys, fmt):
    out, _, manifest = run
    split_dir = {"bin": "shards/bin", "mindrecord": "shards/mindrecord/train"}[fmt]
    assert main(["inspect", "shard", str(out / split_dir), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["shard"]["format"] == fmt
    entry = next(f for f in manifest["shards"]["splits"]["train"]["files"] if f["format"] == fmt)
    assert data["shard"]["file"] == str(out / entry["path"])
