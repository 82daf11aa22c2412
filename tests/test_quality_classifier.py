"""quality_classifier and `dataprep train-quality`: features without a segmenter, training with
held-out figures and a card, threshold and top_fraction (the numpy scorer against fastText's
own: tests/test_quality_linear.py)."""

from __future__ import annotations

import json
import math
import random
import re
import subprocess
import sys
from pathlib import Path

import opencc
import pytest

from dataprep.document import Document, Drop
from dataprep.stage import StageContext, build_params
from dataprep.stats import StageStats
from stages._minhash import CJK, IGNORED, MARK, WORD, char_tables
from stages._quality_features import feature_lines
from stages._quality_linear import LinearModel
from stages._quality_model import load_model, score_texts
from stages.quality_classifier import DEMO_MODEL, QualityClassifier, QualityParams

try:
    from .conftest import REPO, run, stage_stats
except ImportError:
    from conftest import REPO, run, stage_stats  # type: ignore[no-redef]

PROSE = (
    "清晨的阳光照进小院，母亲在厨房里煮粥，父亲坐在门口读报。",
    "我们沿着河边慢慢地走，柳树的影子落在水面上，风里有青草的味道。",
    "这本书讲的是一个普通家庭三代人的故事，语言朴素，却让人读了很久都放不下。",
    "傍晚下了一场小雨，空气变得清新，远处的山也显得更近了。",
    "他在信里写道，城里的冬天比家乡冷，但同事们待他很好，让家人不要挂念。",
    "图书馆三楼靠窗的位置最安静，下午常有学生在那里复习功课。",
    "老师说，写文章要先想清楚要说什么，再想怎么说，最后才是用什么词。",
    "春节前，街上挂满了红灯笼，商店门口排着买年货的人。",
)
KEYWORDS = (
    "免费下载",
    "最新版",
    "高清",
    "破解",
    "代开发票",
    "加微信",
    "点击进入",
    "官网",
    "热门",
    "排行榜",
    "在线观看",
    "手机版",
    "优惠券",
    "秒杀",
    "包邮",
    "正品",
)


def prose(rng: random.Random) -> str:
    return "".join(rng.sample(PROSE, 3))


def keyword_dump(rng: random.Random) -> str:
    return rng.choice([" | ", " · "]).join(rng.choices(KEYWORDS, k=rng.randint(8, 20)))


def test_features_fold_forms_and_need_no_segmenter() -> None:
    simplified = "他们说：这里的风景真美，2023年来了３次。"
    traditional = opencc.OpenCC("s2t").convert(simplified)
    full_width = simplified.replace("2023", "２０２３")
    a, b, c = feature_lines([simplified, traditional, full_width])
    assert a == b == c  # Traditional and full-width forms are folded before the model sees them
    tokens = a.split()
    assert "风" in tokens and "景" in tokens  # one token per Han character
    assert "0000" in tokens  # digits fold to 0 (the model learns lengths of numbers, not values)
    assert feature_lines(["first line\nsecond"])[0].split() == ["first", "line", "¶", "second"]
    assert feature_lines(["", "字"]) == ["", "字"]


def reference_line(text: str, max_chars: int) -> str:
    """feature_lines' contract, one character at a time."""
    fold, cls = char_tables(True)
    words: list[str] = []
    word = ""
    for ch in text[:max_chars]:
        c, k = ord(ch), int(cls[ord(ch)])
        if k == WORD and c != 10:
            word += chr(fold[c])
            continue
        if k == IGNORED:  # removed, no break
            continue
        if word:
            words.append(word)
            word = ""
        if c == 10:
            words.append("¶")
        elif k == CJK:
            words.append(chr(fold[c]))
        elif k == MARK:
            words.append(ch)
    return " ".join([*words, word] if word else words)


def test_feature_lines_follow_the_per_character_reference() -> None:
    rng = random.Random(7)
    alphabet = "ab字詞。，,!\n \t\r\u0301\u200d\u00adéÀ1２Ａ\0¶😀𠀀ｶﾞ한—「」"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(500)]
    texts += ["", "\n", "x" * 50, PROSE[0], keyword_dump(rng)]
    for max_chars in (10, 4000):
        assert feature_lines(texts, max_chars) == [reference_line(t, max_chars) for t in texts]


def test_the_demo_model_tells_prose_from_keyword_dumps() -> None:
    model = load_model(DEMO_MODEL)  # its linear form: scored in numpy (tests/test_quality_linear.py)
    texts = [prose(random.Random(i)) for i in range(5)] + [keyword_dump(random.Random(i)) for i in range(5)]
    scores = score_texts(model, texts)
    assert scores.shape == (10,) and ((scores >= 0) & (scores <= 1)).all()
    assert scores[:5].min() > 0.9 > 0.1 > scores[5:].max()


def test_threshold_drops_low_scores_with_reason_and_score(tmp_path: Path) -> None:
    rng = random.Random(1)
    texts = [prose(rng) for _ in range(6)] + [keyword_dump(rng) for _ in range(6)]
    expected = score_texts(load_model(DEMO_MODEL), texts)
    threshold = float((expected[:6].min() + expected[6:].max()) / 2)
    stage = QualityClassifier(
        build_params(QualityParams, {"model": "demo", "threshold": threshold, "keep_scores": True}, "q")
    )
    ctx = StageContext(stats=StageStats(), work_dir=tmp_path)
    stage.begin_task(ctx)
    results = stage.apply([Document(id=str(i), text=t) for i, t in enumerate(texts)], ctx)
    stats = ctx.stats
    for r, want in zip(results, expected.tolist(), strict=True):
        doc = r.doc if isinstance(r, Drop) else r
        assert math.isclose(doc.meta["quality"], want, abs_tol=1e-6)
        assert doc.meta["scores"]["quality_classifier"]["quality"] == doc.meta["quality"]
        assert isinstance(r, Drop) == (want < threshold)
        if isinstance(r, Drop):
            assert r.reason == "low_quality" and math.isclose(r.score, want, abs_tol=1e-6)
    assert [isinstance(r, Drop) for r in results] == [False] * 6 + [True] * 6
    assert stats.histograms["quality"].total() == len(texts)


@pytest.mark.e2e
def test_top_fraction_keeps_the_best_share_of_each_group(tmp_path: Path) -> None:
    rng = random.Random(2)
    rows = []
    for group in ("a", "b"):
        d = tmp_path / group
        d.mkdir()
        texts = [prose(rng) for _ in range(7)] + [keyword_dump(rng) for _ in range(7)]
        (d / "docs.jsonl").write_text(
            "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts), encoding="utf-8"
        )
        rows.append(len(texts))
    recipe = {
        "name": "q",
        "seed": 0,
        "stages": [
            {"quality_classifier": {"model": "demo", "top_fraction": 0.25, "group_by": "source_dir"}},
            {"tokenize": {"tokenizer": "train", "vocab_size": 300, "train_sample_bytes": 100_000}},
            {"pack": {"seq_length": 16}},
        ],
    }
    stats = run([tmp_path / "a", tmp_path / "b"], tmp_path / "out", recipe)
    s = stage_stats(stats, "quality_classifier")
    assert s["docs_out"] == sum(math.ceil(0.25 * n) for n in rows)  # distinct scores: no ties
    assert s["drops"] == {"low_quality": sum(rows) - s["docs_out"]}
    assert s["histograms"]["quality"]["counts"] and sum(s["histograms"]["quality"]["counts"]) == sum(rows)


def test_train_quality_prints_held_out_figures_and_writes_a_card(tmp_path: Path) -> None:
    rng = random.Random(3)
    pos, neg = tmp_path / "pos.jsonl", tmp_path / "neg.jsonl"
    for path, make in ((pos, prose), (neg, keyword_dump)):
        path.write_text(
            "".join(json.dumps({"text": make(rng)}, ensure_ascii=False) + "\n" for _ in range(150)),
            encoding="utf-8",
        )
    out = tmp_path / "model.npz"
    cmd = [sys.executable, "-m", "dataprep.cli", "train-quality", "--positive", str(pos)]
    cmd += ["--negative", str(neg), "--out", str(out), "--epoch", "5", "--bucket", "4096"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stderr
    m = re.search(
        r"held-out: precision ([\d.]+) recall ([\d.]+) AUC ([\d.]+) \((\d+) positive, (\d+)", proc.stdout
    )
    assert m, proc.stdout
    assert float(m[3]) > 0.9 and int(m[4]) > 0 and int(m[5]) > 0  # separable data, both classes held out
    card = (tmp_path / "model.npz.card.md").read_text(encoding="utf-8")
    assert str(pos) in card and f"{float(m[3]):.3f}" in card
    model = load_model(out)
    assert isinstance(model, LinearModel) and model.bucket == 4096
    s = score_texts(model, [prose(random.Random(99)), keyword_dump(random.Random(99))])
    assert s[0] > s[1]
