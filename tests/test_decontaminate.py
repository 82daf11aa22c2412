"""decontaminate: planted benchmark items are found in every disguise, look-alikes stay, drop and cut
modes, skipped items counted, per-benchmark counts in stats.json and matches in rejected/."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import opencc
import pyarrow.parquet as pq
import pytest
import zstandard

from dataprep.document import Document, Drop
from dataprep.recipe import load_recipe
from dataprep.stage import DriverContext, StageContext, build_params, get
from dataprep.stats import StageStats
from stages.decontaminate import DecontaminateParams

try:
    from .conftest import REPO, run, stage_stats, write_recipe
except ImportError:
    from conftest import REPO, run, stage_stats, write_recipe  # type: ignore[no-redef]

N_CJK = next(f.default for f in dataclasses.fields(DecontaminateParams) if f.name == "ngram_cjk")
N_WORD = next(f.default for f in dataclasses.fields(DecontaminateParams) if f.name == "ngram_word")

ZH = {
    "id": "zh-grain",
    "question": "根据材料，二零二三年全国粮食总产量达到多少万吨，比上年增长了百分之几，主要原因是什么？",
    "choices": ["六万九千五百四十一万吨", "六万八千六百五十三万吨", "七万万吨", "六万五千万吨"],
    "answer": "A",
}
EN = {
    "id": "en-moons",
    "question": "Which planet in the solar system had the largest number of confirmed moons at the end "
    "of the year 2023 according to the survey?",
    "choices": ["Saturn", "Jupiter", "Uranus", "Neptune"],
    "answer": "Saturn",
}
FILLER = (
    "这个周末我们去了郊外的农场，孩子们在田里摘草莓，大人们坐在树荫下聊天。",
    "傍晚下了一场小雨，空气变得清新，远处的山也显得更近了。",
    "回家的路上车很多，我们听着广播里的老歌，慢慢地开。",
)


def printed(item: dict[str, Any]) -> str:
    """An item as a test sheet prints it."""
    return item["question"] + "\n" + "\n".join(f"{'ABCD'[i]}. {c}" for i, c in enumerate(item["choices"]))


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows),
        encoding="utf-8",
    )
    return path


class Ready:
    """The stage set up as a run would (index in a work directory), ready to process batches."""

    def __init__(self, tmp: Path, **params: Any):
        cls = get("decontaminate")
        self.stage = cls(build_params(cls.Params, params, "decontaminate"))
        work = tmp / "work"
        work.mkdir(exist_ok=True)
        self.driver_stats = StageStats()
        self.stage.setup(DriverContext(work, work, ["0"], 0, {}, self.driver_stats, label="decontaminate"))
        self.ctx = StageContext(stats=StageStats(), work_dir=work)
        self.stage.begin_task(self.ctx)

    def process(self, texts: list[str]) -> list[Document | Drop]:
        docs = [Document(id=str(i), text=t) for i, t in enumerate(texts)]
        results = self.stage.process(docs, self.ctx)
        assert len(results) == len(docs)
        return results


@pytest.fixture()
def evalset(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "bench.jsonl", [ZH, EN])


def inside_long(body: str) -> str:
    before = "".join(FILLER * 20)
    return before + "\n" + body + "\n" + "".join(reversed(FILLER * 20))


def repunctuated(text: str) -> str:
    """Punctuation dropped or swapped, spaces added between CJK characters and between words."""
    out = []
    for i, c in enumerate(text):
        if c in "，。？！、,.?!\n":
            out.append(" - " if i % 2 else "")
        elif c == " ":
            out.append(" ;  " if i % 3 == 0 else "   ")
        else:
            out.append(c + (" " if i % 5 == 0 and "\u4e00" <= c <= "\u9fff" else ""))
    return "".join(out)


def fullwidth(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


PLANTED = {
    "zh exact": lambda: FILLER[0] + "\n" + printed(ZH),
    "zh repunctuated": lambda: FILLER[1] + repunctuated(printed(ZH)),
    "zh full-width": lambda: FILLER[2] + fullwidth(printed(ZH)),
    "zh traditional": lambda: opencc.OpenCC("s2t").convert(FILLER[0] + printed(ZH)),
    "zh inside a long document": lambda: inside_long(printed(ZH)),
    "zh question only": lambda: FILLER[1] + ZH["question"],
    "en exact": lambda: "Quiz time.\n" + printed(EN),
    "en repunctuated and upper case": lambda: repunctuated(EN["question"]).upper(),
    "en full-width": lambda: fullwidth(EN["question"]),
    "en inside a long document": lambda: inside_long(EN["question"]),
}


def edited(text: str, every: int) -> str:
    """``text`` with every ``every``-th CJK character replaced (punctuation is not counted)."""
    out, seen = [], 0
    for c in text:
        if "\u4e00" <= c <= "\u9fff":
            seen += 1
            c = "某" if seen % every == 0 else c
        out.append(c)
    return "".join(out)


LOOK_ALIKES = {
    # N-1 consecutive characters of the item, then other text: no n-gram of N shared
    "zh shares n-1 characters": lambda: FILLER[0] + ZH["question"][: N_CJK - 1] + "，我也不太清楚。",
    # one character in N-1 replaced: every window of N holds a replaced character
    "zh lightly edited": lambda: edited(ZH["question"], N_CJK - 1),
    "zh same topic": lambda: "二零二四年全国粮食总产量继续增长，夏粮丰收，秋粮长势良好。",
    "en shares n-1 words": lambda: " ".join(EN["question"].split()[: N_WORD - 1]) + " is a question I like.",
    "en other year and words": lambda: (
        EN["question"].replace("2023", "2021").replace("solar", "Sun's").replace("confirmed", "known")
    ),
    "filler": lambda: "".join(FILLER),
}


def test_planted_items_are_found_in_every_disguise(tmp_path: Path, evalset: Path) -> None:
    ready = Ready(tmp_path, eval_sets=[str(evalset)])
    names = list(PLANTED)
    results = ready.process([PLANTED[n]() for n in names])
    for name, r in zip(names, results, strict=True):
        assert isinstance(r, Drop), f"{name}: not found"
        assert r.reason == "contaminated"
        items = [m["item"] for m in r.extra["matches"]]
        assert items == [ZH["id"] if name.startswith("zh") else EN["id"]], name
        assert all(m["benchmark"] == "bench" for m in r.extra["matches"])
        assert r.score >= 1
    exact = results[names.index("zh exact")]
    m = exact.extra["matches"][0]
    assert ZH["question"].rstrip("？") in exact.doc.text[m["start"] : m["end"]]  # the matched span
    assert ready.ctx.stats.counters["docs_matched.bench"] == len(names)


def test_look_alikes_stay(tmp_path: Path, evalset: Path) -> None:
    ready = Ready(tmp_path, eval_sets=[str(evalset)])
    names = list(LOOK_ALIKES)
    texts = [LOOK_ALIKES[n]() for n in names]
    for name, text, r in zip(names, texts, ready.process(texts), strict=True):
        assert not isinstance(r, Drop), f"{name}: dropped ({r.detail})"
        assert r.text == text
    assert "docs_matched.bench" not in ready.ctx.stats.counters


def test_each_length_finds_what_only_it_can_and_min_matches_raises_the_bar(
    tmp_path: Path, evalset: Path
) -> None:
    text = FILLER[0] + ZH["question"][: N_CJK + 1]  # two n-grams of N, none of N + 2
    assert isinstance(Ready(tmp_path, eval_sets=[str(evalset)]).process([text])[0], Drop)
    assert not isinstance(
        Ready(tmp_path, eval_sets=[str(evalset)], ngram_cjk=N_CJK + 2).process([text])[0], Drop
    )
    assert not isinstance(Ready(tmp_path, eval_sets=[str(evalset)], min_matches=3).process([text])[0], Drop)


def test_cut_removes_the_spans_and_keeps_the_rest(tmp_path: Path, evalset: Path) -> None:
    ready = Ready(tmp_path, eval_sets=[str(evalset)], action="cut", cut_margin=3)
    before, after = "".join(FILLER), "".join(reversed(FILLER))
    long_doc = before + "\n" + printed(ZH) + "\n" + after
    only_item = printed(ZH)
    kept, dropped = ready.process([long_doc, only_item])
    assert isinstance(kept, Document)
    assert ZH["question"][:N_CJK] not in kept.text and ZH["question"][-N_CJK:] not in kept.text
    assert before[:-3] in kept.text and after[3:] in kept.text  # only the margin of the rest goes
    [record] = kept.meta["contamination"]
    assert record["item"] == ZH["id"]
    assert ZH["question"].rstrip("？") in long_doc[record["start"] : record["end"]]
    assert ready.ctx.stats.counters["docs_cut"] == 1
    assert ready.ctx.stats.counters["chars_cut"] == len(long_doc) - len(kept.text)
    assert isinstance(dropped, Drop) and dropped.reason == "contaminated"  # nothing worth keeping left


def test_items_with_missing_fields_are_skipped_and_counted(tmp_path: Path) -> None:
    rows: list[Any] = [
        ZH,
        {k: v for k, v in EN.items() if k != "choices"},  # no choices
        {**EN, "id": "empty", "question": "  "},  # empty question
        "not json",
        {"question": "太短了", "choices": ["是"], "answer": "A"},  # fewer tokens than n
    ]
    path = write_jsonl(tmp_path / "mixed.jsonl", rows)
    other = write_jsonl(tmp_path / "code.jsonl", [{"task_id": "t/0", "prompt": EN["question"]}])
    ready = Ready(tmp_path, eval_sets=[str(path), {"path": str(other), "name": "code", "fields": ["prompt"]}])
    c = ready.driver_stats.counters
    assert c["items.mixed"] == 2 and c["items_skipped.mixed"] == 3 and c["items_too_short.mixed"] == 1
    assert c["items.code"] == 1 and "items_skipped.code" not in c
    # the English item without choices is not in "mixed", but its question is in "code" (by task_id)
    [r] = ready.process([EN["question"]])
    assert isinstance(r, Drop) and [(m["benchmark"], m["item"]) for m in r.extra["matches"]] == [
        ("code", "t/0")
    ]


@pytest.mark.e2e
def test_a_run_counts_per_benchmark_and_rejected_names_item_and_place(tmp_path: Path, evalset: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    planted = [PLANTED["zh exact"](), PLANTED["en exact"](), PLANTED["zh traditional"]()]
    clean = [LOOK_ALIKES[n]() for n in LOOK_ALIKES] + [f"{FILLER[i % 3]}第{i}天。" for i in range(40)]
    write_jsonl(
        corpus,
        [{"id": f"p{i}", "text": t} for i, t in enumerate(planted)]
        + [{"id": f"c{i}", "text": t} for i, t in enumerate(clean)],
    )
    recipe = {
        "name": "decont",
        "seed": 0,
        "stages": [
            {"normalize": {}},
            {"decontaminate": {"eval_sets": [str(evalset)]}},
            {"tokenize": {"tokenizer": "train", "vocab_size": 300, "train_sample_bytes": 100_000}},
            {"pack": {"seq_length": 32}},
        ],
    }
    write_recipe(tmp_path / "r.yaml", recipe)
    stats = run([corpus], tmp_path / "out", recipe)
    s = stage_stats(stats, "decontaminate")
    assert s["drops"] == {"contaminated": len(planted)}
    assert s["docs_out"] == len(clean)
    assert s["counters"]["docs_matched.bench"] == len(planted)
    assert s["counters"]["items.bench"] == 2 and s["counters"]["index_ngrams"] > 0
    assert any(ZH["id"] in e["title"] for e in s["examples"])
    on_disk = json.loads((tmp_path / "out" / "stats.json").read_text(encoding="utf-8"))
    assert stage_stats(on_disk, "decontaminate")["counters"] == s["counters"]
    raw = zstandard.ZstdDecompressor().decompress(
        (tmp_path / "out" / "rejected" / "decontaminate.jsonl.zst").read_bytes(), max_output_size=1 << 24
    )
    records = {r["id"]: r for r in map(json.loads, raw.decode("utf-8").splitlines())}
    assert set(records) == {"p0", "p1", "p2"}
    for rid, item in (("p0", ZH), ("p1", EN), ("p2", ZH)):
        [m] = records[rid]["extra"]["matches"]
        assert (m["benchmark"], m["item"]) == ("bench", item["id"])
        assert m["end"] > m["start"] >= 0
        assert item["id"] in records[rid]["detail"]


def test_the_example_recipe_finds_the_poems_its_sample_benchmark_quotes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)  # the recipe names its eval sets relative to the repository
    spec = next(s for s in load_recipe("quality").stages if s.name == "decontaminate")
    stage = spec.build()
    work = tmp_path / "work"
    work.mkdir()
    driver = StageStats()
    stage.setup(DriverContext(work, work, ["0"], 0, {}, driver, label="decontaminate"))
    ctx = StageContext(stats=StageStats(), work_dir=work)
    stage.begin_task(ctx)
    docs = pq.read_table(REPO / "sample_corpus" / "poetry" / "songci.parquet").to_pylist()
    results = stage.process([Document(id=d["id"], text=d["text"]) for d in docs], ctx)
    found = {r.doc.id: {m["item"] for m in r.extra["matches"]} for r in results if isinstance(r, Drop)}
    # expected, independently: the quoted verse of an item (“...”) inside a poem, punctuation aside
    bare = re.compile(r"[\W_]+")
    rows = [json.loads(x) for x in (REPO / "sample_corpus" / ".eval" / "sample_benchmark.jsonl").open()]
    expected: dict[str, set[str]] = {}
    for row in rows:
        for quote in re.findall(r"“([^”]+)”", row.get("question", "")):
            for d in docs:
                if bare.sub("", quote) in bare.sub("", d["text"]):
                    expected.setdefault(d["id"], set()).add(row["id"])
    assert expected and found == expected
    complete = [r for r in rows if all(r.get(f) for f in ("question", "choices", "answer"))]
    assert driver.counters["items.sample_benchmark"] == len(complete)
    assert driver.counters["items_skipped.sample_benchmark"] == len(rows) - len(complete)
