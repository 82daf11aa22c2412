"""The numpy scorer of the quality model (stages/_quality_linear) gives fastText's own scores:
tiny models trained with fastText's training library, scored both ways on varied texts and on the
real labelled documents of tests/data; the model file; the stage choosing the scorer."""

from __future__ import annotations

import gzip
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dataprep.document import Document, Drop
from dataprep.stage import DriverContext, StageContext, build_params
from dataprep.stats import StageStats
from stages import _quality_linear as ql
from stages._quality_features import NEGATIVE, POSITIVE, feature_lines, tokens
from stages._quality_model import load_model, predict_scores, score_texts
from stages._quality_training import TrainOptions, figures, train_model
from stages.quality_classifier import DEMO_MODEL, QualityClassifier, QualityParams

fasttext = pytest.importorskip("fasttext")
if not hasattr(fasttext, "train_supervised"):
    pytest.skip("needs fastText's training library (fasttext-wheel)", allow_module_level=True)

REPO = Path(__file__).resolve().parent.parent
REAL = REPO / "tests" / "data" / "filter_quality_real.jsonl.gz"
MAX_CHARS = 300
# 32-bit FNV-1a collisions: declinate / macallums (same length: only the characters tell them
# apart), costarring / liquid, altarage / zinke; the first of each pair is trained on
COLLIDING_KNOWN = ["declinate", "macallums", "liquid", "zinke"]
COLLIDING_UNKNOWN = ["costarring", "altarage"]
PROSE = "清晨的阳光照进小院，母亲在厨房里煮粥，父亲坐在门口读报。我们沿着河边慢慢地走，柳树的影子落在水面上。"
JUNK = "免费下载 | 最新版 | 高清 | 破解 | 代开发票 | 加微信 | 点击进入 | 官网 | 热门 | 排行榜"
LATIN = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "while", "model", "reads", "word"]


def _real_docs() -> list[dict]:
    with gzip.open(REAL, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _training_set(rng: random.Random) -> list[tuple[str, bool]]:
    docs = [d for d in _real_docs() if d["split"] == "dev" and d["quality"] in ("good", "bad")]
    out = [(d["text"], d["quality"] == "good") for d in docs]
    for i in range(60):
        words = rng.sample(LATIN, 6) + [COLLIDING_KNOWN[i % 4]] * 2
        out.append((" ".join(words) + f" {PROSE[i % 20 : i % 20 + 12]}", i % 2 == 0))
    return out


def varied_texts(rng: random.Random) -> list[str]:
    """A few hundred texts of every kind the features meet."""
    alphabet = "ab字词。，,!?\n \t\u0301\u200déÀ1２Ａ\0¶😀𠀀ｶﾞ한글—…「」"
    texts = ["", " ", "\n", "\n\n\n", "。", "，。！？", "!!!", "...", "😀", "𠀀𠀁"]
    texts += ["a" * 5000, "字" * 5000, "b" * 70 + " x", "c" * 64, "d" * 65, "é" * 100 + "ab"]
    texts += [PROSE, JUNK, PROSE * 20, " ".join(LATIN), "First line\nsecond line\r\nthird"]
    texts += [" ".join(COLLIDING_KNOWN + COLLIDING_UNKNOWN), "costarring", "macallums", "declinate"]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(150)]
    for _ in range(100):  # Chinese with Latin words, out-of-vocabulary words, digits
        parts = [PROSE[rng.randrange(40) :][: rng.randint(1, 30)] for _ in range(3)]
        parts.insert(
            1, " ".join(rng.choices([*LATIN, "zyxwq", "qqqq", "2024", "Ünïcödé"], k=rng.randint(1, 6)))
        )
        texts.append(rng.choice([" ", "\n", ""]).join(parts))
    texts += [d["text"] for d in _real_docs()[::5]]
    return texts


@pytest.fixture(scope="module", params=[(2, 1 << 14), (3, 10_000)], ids=["bigrams", "trigrams-odd-bucket"])
def models(request, tmp_path_factory) -> tuple:
    """(fastText model, its linear form, the texts trained on) for word_ngrams, bucket."""
    word_ngrams, bucket = request.param
    train = _training_set(random.Random(0))
    out = tmp_path_factory.mktemp("model") / "model.bin"
    options = TrainOptions(epoch=8, dim=16, bucket=bucket, word_ngrams=word_ngrams, max_chars=MAX_CHARS)
    ft = train_model(train, out, options)
    linear, why = ql.from_fasttext(ft, MAX_CHARS)
    assert linear is not None, why
    return ft, linear, train


def test_scores_equal_fasttexts_predict_on_the_same_model(models) -> None:
    ft, linear, _ = models
    texts = varied_texts(random.Random(1))
    ours = ql.score_texts(linear, texts, MAX_CHARS)
    theirs = predict_scores(ft, feature_lines(texts, MAX_CHARS))
    assert len(texts) > 300 and np.ptp(theirs) > 0.5  # scores spread out, not all near 0.5
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5)
    for threshold in (0.1, 0.3, 0.5, 0.7, 0.9):  # (no score within 1e-5 of one: a tie would be luck)
        assert np.abs(theirs - threshold).min() > 1e-5
        assert ((ours >= threshold) == (theirs >= threshold)).all()
    # the texts without any token still get a score: fastText reads the end-of-line token
    assert ours[0] == pytest.approx(theirs[0], abs=1e-6) and ours[0] > 0
    # two trained words share a 32-bit hash and are still told apart; an unknown one is no word
    tok = tokens(["declinate macallums costarring liquid"])
    first_hash, first_id = ql.first_chars(linear, tok)
    ids = ql.word_ids(linear, tok, ql.token_hashes(tok, first_hash), first_id)
    known = [linear.words.index(w) for w in ("declinate", "macallums", "liquid")]
    assert ids.tolist() == [known[0], known[1], -1, known[2]]


def test_batches_of_any_size_give_the_same_scores(models) -> None:
    _, linear, _ = models
    texts = varied_texts(random.Random(2))
    whole = ql.score_texts(linear, texts, MAX_CHARS)
    pieces = np.concatenate(
        [ql.score_texts(linear, texts[i : i + 7], MAX_CHARS) for i in range(0, len(texts), 7)]
    )
    assert np.array_equal(whole, pieces)
    assert ql.score_texts(linear, [], MAX_CHARS).shape == (0,)


def test_real_labelled_documents_score_alike_and_are_told_apart(models) -> None:
    ft, linear, _ = models
    docs = [d for d in _real_docs() if d["quality"] in ("good", "bad")]
    texts = [d["text"] for d in docs]
    ours = score_texts(linear, texts, MAX_CHARS)
    np.testing.assert_allclose(ours, score_texts(ft, texts, MAX_CHARS), rtol=0, atol=1e-5)
    held = np.array([d["split"] == "heldout" for d in docs])
    labels = np.array([d["quality"] == "good" for d in docs])
    assert figures(labels[held], ours[held]).auc > 0.8


def test_token_hashes_are_fasttexts_fnv1a_of_the_utf8_bytes(models) -> None:
    ft, linear, _ = models
    texts = [
        "ab 字 é 😀 " + "x" * 100,
        "Ünïcödé costarring liquid",
        "ｶﾞ 한글 2024 ¶",
        "z" * 64 + " " + "y" * 65,
    ]
    tok = tokens(texts)
    words = " ".join(feature_lines(texts)).split()
    hashes = ql.token_hashes(tok)
    assert hashes.tolist() == [ql.fnv_str(w) for w in words]
    # fastText's own hash, modulo the buckets: the row it gives a string as a subword
    assert [ft.f.getSubwordId(w) - linear.nwords for w in words] == [
        h % linear.bucket for h in hashes.tolist()
    ]
    assert ql.fnv_str("costarring") == ql.fnv_str("liquid")


def test_model_file_round_trips_byte_for_byte(models, tmp_path: Path) -> None:
    _, linear, _ = models
    path = tmp_path / "m.npz"
    ql.save(linear, path)
    assert ql.to_bytes(linear) == path.read_bytes()  # the same bytes for the same model
    loaded = load_model(path)
    assert isinstance(loaded, ql.LinearModel) and loaded.words == linear.words
    texts = varied_texts(random.Random(3))
    assert np.array_equal(ql.score_texts(loaded, texts, MAX_CHARS), ql.score_texts(linear, texts, MAX_CHARS))
    (tmp_path / "bad.npz").write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(ValueError):
        ql.load(tmp_path / "bad.npz")


def test_models_without_a_linear_form_are_named(tmp_path: Path) -> None:
    train = _training_set(random.Random(4))
    ftz = train_model(train, tmp_path / "m.ftz", TrainOptions(epoch=2, bucket=1 << 12, cutoff=500))
    assert ql.from_fasttext(ftz) == (None, "quantized")
    lines = tmp_path / "three.txt"
    labels = (POSITIVE, NEGATIVE, "__label__other")
    lines.write_text("".join(f"{labels[i % 3]} a b c{i % 5}\n" for i in range(60)), encoding="utf-8")
    three = fasttext.train_supervised(input=str(lines), epoch=1, thread=1, verbose=0, minCount=1)
    assert "labels" in ql.from_fasttext(three)[1]
    sub = fasttext.train_supervised(input=str(lines), epoch=1, thread=1, verbose=0, minn=2, maxn=3)
    assert ql.from_fasttext(sub)[0] is None


def _stage_scores(model: str, work: Path, texts: list[str]) -> tuple[np.ndarray, StageStats, StageStats]:
    stage = QualityClassifier(build_params(QualityParams, {"model": model, "threshold": 0.5}, "q"))
    work.mkdir()
    setup_stats = StageStats()
    stage.setup(DriverContext(work, work, ["0"], 0, {}, setup_stats, label="q"))
    ctx = StageContext(stats=StageStats(), work_dir=work)
    stage.begin_task(ctx)
    results = stage.apply([Document(id=str(i), text=t) for i, t in enumerate(texts)], ctx)
    scores = np.array([(r.doc if isinstance(r, Drop) else r).meta["quality"] for r in results])
    return scores, setup_stats, ctx.stats


def test_stage_converts_a_fasttext_bin_and_falls_back_for_a_quantized_one(models, tmp_path: Path) -> None:
    ft = models[0]
    texts = varied_texts(random.Random(5))[:80]
    ft.save_model(str(tmp_path / "m.bin"))
    scores, setup, stats = _stage_scores(str(tmp_path / "m.bin"), tmp_path / "bin", texts)
    assert (tmp_path / "bin" / "model.npz").exists() and not (tmp_path / "bin" / "model.bin").exists()
    assert stats.counters["scored_numpy"] == len(texts) and not setup.examples
    # the stage reads max_chars from its parameters (4000 by default)
    np.testing.assert_allclose(scores, np.round(score_texts(ft, texts, 4000), 6), atol=1e-5)
    train = _training_set(random.Random(6))
    ftz = tmp_path / "m.ftz"
    quantized = train_model(train, ftz, TrainOptions(epoch=2, bucket=1 << 12, cutoff=500))
    scores, setup, stats = _stage_scores(str(ftz), tmp_path / "ftz", texts)
    assert (tmp_path / "ftz" / "model.bin").exists() and not (tmp_path / "ftz" / "model.npz").exists()
    assert stats.counters["scored_fasttext"] == len(texts)
    assert "quantized" in setup.examples[0]["items"][0]["text"]
    assert np.array_equal(scores, np.round(score_texts(quantized, texts, 4000), 6))


def test_the_demo_model_is_scored_in_numpy() -> None:
    model = load_model(DEMO_MODEL)
    assert isinstance(model, ql.LinearModel) and model.bucket == 1 << 19 and model.word_ngrams == 2
    assert DEMO_MODEL.stat().st_size <= 5_000_000
    s = score_texts(model, [PROSE, JUNK])
    assert s[0] > 0.9 > 0.1 > s[1]


def test_an_existing_fasttext_bin_converts_from_the_command_line(models, tmp_path: Path) -> None:
    ft, linear, _ = models
    ft.save_model(str(tmp_path / "m.bin"))
    cmd = [sys.executable, "-m", "stages._quality_linear", str(tmp_path / "m.bin"), str(tmp_path / "m.npz")]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stderr
    converted = ql.load(tmp_path / "m.npz")
    assert converted.words == linear.words and np.array_equal(converted.rows, linear.rows)
