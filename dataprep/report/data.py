"""What report.html shows, gathered from stats.json and OUT/rejected: the plot specs (plain
JSON, everything each plot shows), the input problems and the example rejected records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

EXAMPLES_PER_REASON = 3
REJECTED_SCAN = 20_000  # records read per rejected/ file at most, looking for examples
CATEGORY_TOP = 14  # categories drawn per group; the rest are summed as "other"
CATEGORY_PREFIXES = ("lang.", "script.")


def _category_items(counters: dict[str, int], prefix: str) -> list[list[Any]]:
    """(name, count) of the counters named ``prefix`` + name, largest first, the ones beyond
    CATEGORY_TOP summed as "other (N)"."""
    items = sorted(
        ([k[len(prefix) :], v] for k, v in counters.items() if k.startswith(prefix)),
        key=lambda kv: (-kv[1], kv[0]),
    )
    if len(items) > CATEGORY_TOP:
        rest = items[CATEGORY_TOP - 1 :]
        items = [*items[: CATEGORY_TOP - 1], [f"other ({len(rest)})", sum(v for _, v in rest)]]
    return items


def _where_key(where: str) -> tuple[str, int]:
    """Sort key of a ``file`` or ``file:line`` location: by file, then by line as a number."""
    file, _, line = where.rpartition(":")
    return (file, int(line)) if file and line.isdigit() else (where, 0)


def input_problem_rows(inputs: dict[str, Any]) -> list[list[str]]:
    """[where, kind, message] of each input problem once, by file and line: the files that
    produced no task (``file_notes``) and the sampled problems (``problem_samples``), which name
    the same file-level problems again (both come from one report)."""
    seen: dict[tuple[str, str], list[str]] = {}
    for n in inputs.get("file_notes", []):
        seen.setdefault((n["file"], n["kind"]), [n["file"], n["kind"], n["message"]])
    for kind, items in inputs.get("problem_samples", {}).items():
        for it in items:
            seen.setdefault((it["where"], kind), [it["where"], kind, it["message"]])
    return sorted(seen.values(), key=lambda row: (_where_key(row[0]), row[1]))


def plot_specs(stats: dict[str, Any]) -> list[dict[str, Any]]:
    """The plots of the page, in order, as JSON-serialisable specs (what each plot shows); needs
    only ``stats["stages"]`` and ``stats["length_chars"]``."""
    stages = stats["stages"]
    drops = [[f"{s['label']}/{r}", n] for s in stages for r, n in s["drops"].items()]
    drops.sort(key=lambda x: x[1])
    specs: list[dict[str, Any]] = [
        {
            "kind": "funnel",
            "stages": [{k: s[k] for k in ("label", "docs_out", "chars_out")} for s in stages],
        },
        {"kind": "drops", "items": drops},
        {
            "kind": "hist",
            "title": "characters per document",
            "series": {"read": stats["length_chars"]["read"], "kept": stats["length_chars"]["kept"]},
            "xlabel": "characters",
            "ylabel": "documents",
        },
    ]
    for s in stages:
        if any(k.startswith("lang.") for k in s["counters"]):  # lang_id: documents per language
            specs.append(
                {
                    "kind": "categories",
                    "stage": s["label"],
                    "title": f"{s['label']}: documents per language and script (before its drops)",
                    "groups": {
                        "language": _category_items(s["counters"], "lang."),
                        "script": _category_items(s["counters"], "script."),
                    },
                }
            )
        for name, h in s["histograms"].items():
            if s["label"] == "read" and name == "length_chars":
                continue
            title = f"{s['label']}: {name}"
            specs.append(
                {
                    "kind": "hist",
                    "stage": s["label"],
                    "title": title,
                    "series": {name: h},
                    "xlabel": name,
                    "ylabel": "count",
                }
            )
    return specs


def rejected_examples(
    out: Path, per_reason: int = EXAMPLES_PER_REASON
) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """The first ``per_reason`` rejected records of every (stage label, reason) in
    ``out/rejected`` (at most REJECTED_SCAN records read per file); empty when there is none."""
    from dataprep.docstore import read_rejected

    found: dict[tuple[str, str], list[dict[str, Any]]] = {}
    folder = out / "rejected"
    if not folder.is_dir():
        return found
    for path in sorted(folder.glob("*.jsonl.zst")):
        for k, rec in enumerate(read_rejected(path)):
            key = (str(rec.get("stage", "")), str(rec.get("reason", "")))
            bucket = found.setdefault(key, [])
            if len(bucket) < per_reason:
                bucket.append(rec)
            if k >= REJECTED_SCAN:
                break
    return found
