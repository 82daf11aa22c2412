"""Undeclared non-UTF-8 files: the planner's rule against charset-normalizer, on real Chinese text.

Usage: python bench/bench_charset.py --corpora DIR [--files 300] [--out bench/results/NAME.md]

Files are made from real text of DIR/zh_mixed.jsonl.gz and DIR/zh_poetry.jsonl.gz: Simplified
documents (script Hans) encoded as GB18030, Traditional ones (Hant) as Big5 (documents Big5
cannot encode are left out), both kinds as UTF-8, and some as UTF-16 without a byte-order mark.
Each file is consecutive documents of one corpus and script, one per line, up to a size drawn
from SIZES (short files are the hard case).
The detectors see what the planner sniffs, the first 8,192 bytes of a file:

  rule         dataprep.planning's rule with the default encoding, before charset-normalizer was
               adopted (more than 5% of the head not UTF-8, at most 1% control bytes): "not
               UTF-8" or nothing; it names no encoding
  charset      dataprep.io.guess_encoding, what the planner uses now: charset_normalizer's
               from_bytes(head).best() on the head cut after its last newline, else cut at a
               multiple of 4 bytes (a head cut inside a character is no valid text in any
               encoding): an encoding name
  charset-raw  the same on the head as it comes (cut anywhere)

Per class: files called non-UTF-8, files whose encoding was named right (GB18030, GBK and GB2312
count as GB18030; Big5, Big5-HKSCS and cp950 as Big5; UTF-8 and ASCII as UTF-8), files whose
whole bytes decode to their text with the named codec, and the CPU time per file (mean, p95)
with the ratio charset / rule measured in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import random
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SIZES = (300, 1_000, 4_000, 16_000)  # bytes of text per file, before encoding (about)
HEAD = 8192
FAMILY = {
    "gb18030": "gb18030",
    "gbk": "gb18030",
    "gb2312": "gb18030",
    "big5": "big5",
    "big5hkscs": "big5",
    "cp950": "big5",
    "utf_16_le": "utf-16-le",
    "utf_16_be": "utf-16-be",
    "utf_8": "utf-8",
    "ascii": "utf-8",
}


def documents(path: Path, script: str, limit: int) -> list[str]:
    """Up to ``limit`` texts of ``script`` from a JSONL.gz corpus, in file order."""
    out = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("script") == script and rec["text"].strip():
                out.append(rec["text"].replace("\r", ""))
                if len(out) >= limit:
                    break
    return out


def make_files(texts: list[str], codec: str, n: int, seed: int) -> list[tuple[bytes, str]]:
    """n (file bytes, text) of consecutive texts encodable in ``codec``, sizes drawn from SIZES."""
    rng = random.Random(seed)
    files, i = [], rng.randrange(len(texts))
    while len(files) < n:
        target, parts, size = rng.choice(SIZES), [], 0
        while size < target:
            t = texts[i % len(texts)]
            i += 1
            try:
                t.encode(codec)
            except UnicodeEncodeError:
                continue
            parts.append(t)
            size += len(t.encode("utf-8"))
        text = "\n".join(parts) + "\n"
        files.append((text.encode(codec), text))
        i += rng.randrange(50)  # not every file starts where the last ended
    return files


def rule(head: bytes) -> str | None:
    bad = len(head) - len(head.decode("utf-8", "ignore").encode("utf-8"))
    controls = len(re.findall(rb"[\x00-\x08\x0e-\x1a\x1c-\x1f]", head))
    return "not-utf-8" if bad - 3 > 0.05 * len(head) and controls <= 0.01 * len(head) else "utf-8"


def charset_raw(head: bytes) -> str | None:
    from charset_normalizer import from_bytes

    best = from_bytes(head).best()
    return None if best is None else FAMILY.get(best.encoding, best.encoding)


def charset(head: bytes) -> str | None:
    from dataprep.io import guess_encoding

    name = guess_encoding(head, whole=len(head) < HEAD)
    return FAMILY.get(name.replace("-", "_"), name) if name else None


def measure(files: dict[str, list[tuple[bytes, str]]]) -> dict[str, dict[str, dict[str, float]]]:
    results: dict[str, dict[str, dict[str, float]]] = {}
    for name, detect in (("rule", rule), ("charset", charset), ("charset-raw", charset_raw)):
        detect(b"warm up: imports and tables")
        per_class = {}
        for cls, items in files.items():
            flagged = named = decoded = 0
            seconds = []
            for data, text in items:
                head = data[:HEAD]
                t0 = time.process_time()
                answer = detect(head)
                seconds.append(time.process_time() - t0)
                flagged += answer != "utf-8"
                named += answer == cls
                if answer not in (None, "not-utf-8"):
                    with contextlib.suppress(UnicodeDecodeError, LookupError):
                        decoded += data.decode(answer) == text
            seconds.sort()
            per_class[cls] = {
                "files": len(items),
                "non_utf8": flagged,
                "named": named,
                "decoded": decoded,
                "ms_mean": 1000 * statistics.fmean(seconds),
                "ms_p95": 1000 * seconds[int(0.95 * (len(seconds) - 1))],
            }
        results[name] = per_class
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", type=Path, required=True)
    ap.add_argument("--files", type=int, default=300, help="files per class")
    ap.add_argument("--out", type=Path, help="also write the table as Markdown here")
    args = ap.parse_args()
    import charset_normalizer

    hans = documents(args.corpora / "zh_mixed.jsonl.gz", "Hans", 20_000)
    hant = documents(args.corpora / "zh_poetry.jsonl.gz", "Hant", 20_000)
    hant += documents(args.corpora / "zh_mixed.jsonl.gz", "Hant", 5_000)
    n = args.files
    files = {
        "gb18030": make_files(hans, "gb18030", n, 1),
        "big5": make_files(hant, "big5", n, 2),
        "utf-8": make_files(hans, "utf-8", n // 2, 3) + make_files(hant, "utf-8", n - n // 2, 4),
        "utf-16-le": make_files(hans, "utf-16-le", n // 2, 5),  # no byte-order mark
        "utf-16-be": make_files(hant, "utf-16-be", n // 2, 6),
    }
    results = measure(files)
    lines = [
        f"charset-normalizer {charset_normalizer.__version__}; {n} files per class, sizes {SIZES} bytes "
        f"of text; detectors see the first {HEAD} bytes",
        "",
        "| class | detector | called non-UTF-8 | encoding named right | decodes to its text "
        "| ms/file mean | p95 |",
        "|---|---|---|---|---|---|---|",
    ]
    for cls in files:
        for name in ("rule", "charset", "charset-raw"):
            r = results[name][cls]
            named = "n/a (names none)" if name == "rule" else f"{r['named']:.0f}/{r['files']:.0f}"
            decoded = "n/a" if name == "rule" else f"{r['decoded']:.0f}"
            lines.append(
                f"| {cls} | {name} | {r['non_utf8']:.0f}/{r['files']:.0f} | {named} | {decoded} "
                f"| {r['ms_mean']:.3f} | {r['ms_p95']:.3f} |"
            )
    ratio = statistics.fmean(results["charset"][c]["ms_mean"] for c in files) / statistics.fmean(
        results["rule"][c]["ms_mean"] for c in files
    )
    lines += ["", f"CPU per file, charset / rule (mean over the classes): {ratio:.0f}x"]
    by_size = {}
    for cls in ("gb18030", "big5"):
        for (data, _), size in zip(files[cls], (len(d) for d, _ in files[cls]), strict=True):
            by_size.setdefault((cls, size < 2_000), []).append(charset(data[:HEAD]) == cls)
    lines.append(
        "charset-normalizer named right, files under 2,000 bytes / larger: "
        + "; ".join(
            f"{cls} {sum(by_size[(cls, True)])}/{len(by_size[(cls, True)])}"
            f" / {sum(by_size[(cls, False)])}/{len(by_size[(cls, False)])}"
            for cls in ("gb18030", "big5")
        )
    )
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
