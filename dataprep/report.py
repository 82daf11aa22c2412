"""report.html: one self-contained page (PNG plots embedded) built from stats.json and manifest.json.

Plots: the funnel of documents and characters through the stages, drops by reason, document
length before and after, one plot per histogram a stage recorded (filter scores, cluster
sizes), documents per language and script (counters ``lang.*`` and ``script.*``, e.g. of
lang_id), and the examples stages recorded (e.g. duplicate clusters, members side by side).
``dataprep report OUT`` rebuilds it from the JSON files alone.

Each plot is described by a *spec* (:func:`plot_specs`: plain JSON data, everything the plot
shows) and drawn by :func:`render_plot`, a pure function of its spec. So plots can be drawn ahead
of time, elsewhere (:func:`render_plots`, e.g. in a worker while the last global stage decides),
and handed to :func:`render`, which uses a drawing only when its spec equals the one it needs:
the page is the same whichever process drew it.
"""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Any

from dataprep.io import write_text_atomic


def _png(fig: Any, alt: str = "plot", tight: bool = True) -> str:
    """The figure as an embedded PNG. ``tight`` crops to the drawn content, which costs a second
    draw; figures laid out with fixed margins pass False (half the time)."""
    buf = io.BytesIO()
    bbox = "tight" if tight else None
    fig.savefig(buf, format="png", dpi=90, bbox_inches=bbox, metadata={"Software": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode()
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _bin_labels(edges: list[float]) -> list[str]:
    def short(x: float) -> str:
        for unit, size in (("M", 1 << 20), ("k", 1 << 10)):
            if x >= size and x % size == 0:
                return f"{int(x // size)}{unit}"
        return f"{x:g}"

    return [f"<{short(edges[0])}"] + [f"{short(a)}-" for a in edges[:-1]] + [f"≥{short(edges[-1])}"]


def _hist_plot(title: str, series: dict[str, dict[str, Any]], xlabel: str, ylabel: str) -> str:
    import matplotlib.pyplot as plt
    import numpy as np

    first = next(iter(series.values()))
    counts = {k: np.asarray(v["counts"]) for k, v in series.items()}
    nonzero = np.flatnonzero(sum(counts.values()))
    if nonzero.size == 0:
        return f"<p>{html.escape(title)}: no data</p>"
    lo, hi = nonzero[0], nonzero[-1] + 1
    labels = _bin_labels(first["edges"])[lo:hi]
    fig, ax = plt.subplots(figsize=(8, 3))
    fig.subplots_adjust(left=0.1, right=0.98, top=0.88, bottom=0.3)  # bin labels are <= 8 chars
    width = 0.8 / len(series)
    x = np.arange(hi - lo)
    for i, (name, c) in enumerate(counts.items()):
        ax.bar(x + i * width, c[lo:hi], width=width, label=name)
    ax.set_xticks(x + width * (len(series) - 1) / 2, labels, rotation=60, fontsize=7)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if len(series) > 1:
        ax.legend()
    return _png(fig, title, tight=False)


def _funnel(stages: list[dict[str, Any]]) -> str:
    import matplotlib.pyplot as plt

    labels = [s["label"] for s in stages]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3))
    for ax, key, title in (
        (axes[0], "docs_out", "documents after each stage"),
        (axes[1], "chars_out", "characters after each stage"),
    ):
        values = [s[key] for s in stages]
        ax.barh(labels[::-1], values[::-1], color="#4878a8")
        ax.set_title(title)
        for y, v in enumerate(values[::-1]):
            ax.text(v, y, f" {v:,}", va="center", fontsize=7)
    return _png(fig)


def _drops(items: list[list[Any]]) -> str:
    import matplotlib.pyplot as plt

    if not items:
        return "<p>No document was dropped.</p>"
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(items) + 1))
    ax.barh([k for k, _ in items], [n for _, n in items], color="#c05050")
    for y, (_, n) in enumerate(items):
        ax.text(n, y, f" {n:,}", va="center", fontsize=7)
    ax.set_title("documents dropped, by stage and reason")
    return _png(fig)


def _categories(title: str, groups: dict[str, list[list[Any]]]) -> str:
    """One horizontal bar panel per group of (name, count) pairs (e.g. documents per language
    and per script), side by side."""
    import matplotlib.pyplot as plt

    groups = {k: v for k, v in groups.items() if v}
    if not groups:
        return f"<p>{html.escape(title)}: no data</p>"
    tallest = max(len(v) for v in groups.values())
    fig, axes = plt.subplots(1, len(groups), figsize=(10, 0.28 * tallest + 1.2), squeeze=False)
    for ax, (name, items) in zip(axes[0], groups.items(), strict=True):
        labels = [str(k) for k, _ in items][::-1]
        values = [n for _, n in items][::-1]
        ax.barh(labels, values, color="#4878a8")
        for y, v in enumerate(values):
            ax.text(v, y, f" {v:,}", va="center", fontsize=7)
        ax.set_title(name, fontsize=10)
        ax.tick_params(axis="y", labelsize=8)
        ax.margins(x=0.15)
    fig.suptitle(title, y=1.0)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return _png(fig, title)


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


def _table(rows: list[list[Any]], header: list[str]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def marked_differences(base: str, other: str) -> tuple[str, str]:
    """(base, other) as HTML with the spans where they differ in ``<mark>`` (difflib's matching
    blocks of characters)."""
    import difflib

    a, b = [], []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, base, other, autojunk=False).get_opcodes():
        x, y = html.escape(base[i1:i2]), html.escape(other[j1:j2])
        if op == "equal":
            a.append(x)
            b.append(y)
        else:
            a.append(f"<mark>{x}</mark>" if x else "")
            b.append(f"<mark>{y}</mark>" if y else "")
    return "".join(a), "".join(b)


def _example_cells(ex: dict[str, Any]) -> list[str]:
    """The items' texts as HTML; for a ``compare`` example, each one after the first with what
    differs from the first marked (and the first with what differs from the second)."""
    texts = [str(it.get("text", "")) for it in ex.get("items", [])]
    if not ex.get("compare") or len(texts) < 2:
        return [html.escape(t) for t in texts]
    cells = [marked_differences(texts[0], texts[1])[0]]
    cells += [marked_differences(texts[0], t)[1] for t in texts[1:]]
    return cells


def _examples(label: str, examples: list[dict[str, Any]]) -> str:
    """A stage's examples, each as one table row with its items side by side."""
    out = [f"<h2>Examples: {html.escape(label)}</h2>"]
    for ex in examples:
        items = ex.get("items", [])
        head = "".join(f"<th>{html.escape(str(it.get('label', '')))}</th>" for it in items)
        cells = "".join(f"<td>{cell}</td>" for cell in _example_cells(ex))
        out.append(
            f"<p><b>{html.escape(str(ex.get('title', '')))}</b></p>"
            f"<table class='examples'><tr>{head}</tr><tr>{cells}</tr></table>"
        )
    return "".join(out)


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
                {"kind": "hist", "title": title, "series": {name: h}, "xlabel": name, "ylabel": "count"}
            )
    return specs


def spec_key(spec: dict[str, Any]) -> str:
    return json.dumps(spec, sort_keys=True, ensure_ascii=False)


def render_plot(spec: dict[str, Any]) -> str:
    """The HTML of one plot (an embedded PNG, or a line of text when there is nothing to draw)."""
    import matplotlib

    matplotlib.use("Agg")
    if spec["kind"] == "funnel":
        return _funnel(spec["stages"])
    if spec["kind"] == "drops":
        return _drops(spec["items"])
    if spec["kind"] == "categories":
        return _categories(spec["title"], spec["groups"])
    return _hist_plot(spec["title"], spec["series"], spec["xlabel"], spec["ylabel"])


def render_plots(specs: list[dict[str, Any]]) -> dict[str, str]:
    """{spec_key(spec): render_plot(spec)} for every spec (to draw plots ahead of time)."""
    return {spec_key(spec): render_plot(spec) for spec in specs}


def render(stats: dict[str, Any], manifest: dict[str, Any], drawn: dict[str, str] | None = None) -> str:
    """The page. ``drawn``: plots drawn ahead of time (:func:`render_plots`); a plot whose spec
    is not among them is drawn here."""
    drawn = drawn or {}
    plots = [drawn.get(spec_key(spec)) or render_plot(spec) for spec in plot_specs(stats)]
    funnel, drops, lengths, *histograms = plots
    stages = stats["stages"]
    totals = stats["totals"]
    parts = [
        f"<h1>dataprep report: {html.escape(stats['recipe']['name'])}</h1>",
        f"<p>recipe hash <code>{stats['recipe']['hash'][:16]}</code> · "
        f"{stats['input']['files']} input files, "
        f"{stats['input']['bytes']:,} bytes, {stats['input']['tasks']} tasks · "
        f"<b>{totals['docs_in']:,}</b> documents read, <b>{totals['kept']:,}</b> kept, "
        f"<b>{totals['dropped']:,}</b> dropped</p>",
        *(
            [f"<p class='outcome'><b>The run failed:</b> {html.escape(stats['outcome']['message'])}</p>"]
            if stats.get("outcome")
            else []
        ),
        "<h2>Funnel</h2>",
        funnel,
        _table(
            [
                [
                    s["label"],
                    s["kind"],
                    s["docs_in"],
                    s["docs_out"],
                    sum(s["drops"].values()),
                    s["chars_in"],
                    s["chars_out"],
                ]
                for s in stages
            ],
            ["stage", "kind", "docs in", "docs out", "dropped", "chars in", "chars out"],
        ),
        "<h2>Drops by reason</h2>",
        drops,
        "<h2>Document length</h2>",
        lengths,
    ]
    counters = [  # per-language and per-script counts are drawn (categories plot), not listed
        [s["label"], k, v]
        for s in stages
        for k, v in s["counters"].items()
        if not k.startswith(CATEGORY_PREFIXES)
    ]
    if counters:
        parts += ["<h2>Counters</h2>", _table(counters, ["stage", "counter", "value"])]
    parts += histograms
    for s in stages:
        if s.get("examples"):
            parts.append(_examples(s["label"], s["examples"]))
    problems = stats["input"]["problem_samples"]
    if problems or stats["input"]["file_notes"]:
        parts.append("<h2>Input problems</h2>")
        rows = [[n["kind"], n["file"], n["message"]] for n in stats["input"]["file_notes"]]
        rows += [[kind, it["where"], it["message"]] for kind, items in problems.items() for it in items]
        parts.append(_table(rows, ["kind", "where", "message"]))
    shards = {k: v for k, v in manifest.items() if k not in ("inputs",)}
    parts += [
        "<h2>Manifest</h2>",
        f"<pre>{html.escape(json.dumps(shards, ensure_ascii=False, indent=1)[:20000])}</pre>",
    ]
    style = (
        "body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse;"
        "margin:1em 0}td,th{border:1px solid #ccc;padding:2px 8px;font-size:13px;text-align:right}"
        "td:first-child{text-align:left}pre{background:#f6f6f6;padding:1em;font-size:12px}"
        "table.examples td{text-align:left;vertical-align:top;white-space:pre-wrap;max-width:360px;"
        "font-size:12px}mark{background:#ffd966}"
        ".outcome{background:#fbe3e3;border:1px solid #c05050;padding:.6em}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>dataprep report</title>"
        f"<style>{style}</style></head><body>{''.join(parts)}</body></html>"
    )


def write_report(
    out: Path,
    stats: dict[str, Any] | None = None,
    manifest: dict[str, Any] | None = None,
    drawn: dict[str, str] | None = None,
) -> Path:
    """Write out/report.html from the given (or the saved) stats and manifest (and plots drawn
    ahead of time, see :func:`render`)."""
    if stats is None:
        stats = json.loads((out / "stats.json").read_text(encoding="utf-8"))
    if manifest is None:
        manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    path = out / "report.html"
    write_text_atomic(path, render(stats, manifest, drawn))
    return path
