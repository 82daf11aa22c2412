"""report.html: one self-contained page (SVG plots inline) built from stats.json, manifest.json
and the first records of OUT/rejected.

The page: a summary, the funnel of documents and characters through the stages, drops by stage
and reason (a plot, then a table whose rows open on example documents, where the first one came
from, their score and detail), document length before and after, documents per language and
script (counters ``lang.*`` and ``script.*`` of lang_id), then one section per stage with its
counters, one plot per histogram it recorded (filter scores, cluster sizes) and the examples it
recorded (e.g. duplicate clusters, members side by side with what differs marked), input
problems and the manifest. Plots are SVG with their text as text (a browser lays it out:
tests/test_report_browser.py checks in Chromium that no two labels overlap). ``dataprep report
OUT`` rebuilds it from the files alone.

Each plot is described by a *spec* (:func:`plot_specs`: plain JSON data, everything the plot
shows) and drawn by :func:`render_plot`, a pure function of its spec. So plots can be drawn ahead
of time, elsewhere (:func:`render_plots`, e.g. in a worker while the last global stage decides),
and handed to :func:`render`, which uses a drawing only when its spec equals the one it needs:
the page is the same whichever process drew it.
"""

from __future__ import annotations

import html
import io
import json
from pathlib import Path
from typing import Any

from dataprep.io import write_text_atomic

FONT = "DejaVu Sans"  # matplotlib's own font: the browser lays the labels out with the same metrics
EXAMPLES_PER_REASON = 3
REJECTED_SCAN = 20_000  # records read per rejected/ file at most, looking for examples
LOG_SCALE_RATIO = (
    50  # a histogram whose largest bin is this many times its smallest non-empty one is drawn on a log scale
)


def _svg(fig: Any, alt: str = "plot") -> str:
    """The figure as inline SVG whose text stays text (a browser renders and lays it out, a
    reader can select it), without the XML prologue; deterministic (fixed ids, no date)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None}, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    svg = buf.getvalue()
    svg = svg[svg.index("<svg") :]
    return f'<figure role="img" aria-label="{html.escape(alt)}">{svg}</figure>'


def _style_matplotlib() -> None:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams.update(
        {"svg.fonttype": "none", "svg.hashsalt": "dataprep", "font.family": FONT, "font.size": 9}
    )


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
    fig, ax = plt.subplots(figsize=(6, 3.2), layout="constrained")  # one size: plots sit side by side
    width = 0.8 / len(series)
    x = np.arange(hi - lo)
    for i, (name, c) in enumerate(counts.items()):
        ax.bar(x + i * width, c[lo:hi], width=width, label=name)
    ax.set_xticks(x + width * (len(series) - 1) / 2, labels, rotation=90, fontsize=7)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    positive = np.concatenate([c[c > 0] for c in counts.values()])
    if positive.max() >= LOG_SCALE_RATIO * positive.min():  # a few outliers beside one big bin
        ax.set_yscale("log")
        ax.set_ylim(bottom=0.5)  # a bin of one document stays visible
        ylabel += " (log scale)"
    ax.set_ylabel(ylabel)
    if len(series) > 1:
        ax.legend(fontsize=8)
    return _svg(fig, title)


def _short_number(x: float, _pos: object = None) -> str:
    """An axis tick as 1.2M / 340k / 12 (no offset text such as "1e6" beside the axis)."""
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.3g}{unit}"
    return f"{x:g}"


def _bars(ax: Any, labels: list[str], values: list[int], color: str) -> None:
    """Horizontal bars, the first at the top, each with its value after it; room is left on the
    right for the longest value label."""
    ys = list(range(len(values)))[::-1]
    ax.barh(ys, values, color=color, height=0.7)
    ax.set_yticks(ys, labels, fontsize=8)
    top = max(values) if values and max(values) > 0 else 1
    ax.set_xlim(0, top * 1.35)
    ax.xaxis.set_major_formatter(_short_number)
    for y, v in zip(ys, values, strict=True):
        ax.text(v + top * 0.01, y, f"{v:,}", va="center", fontsize=7)
    ax.tick_params(axis="x", labelsize=7)


def _funnel(stages: list[dict[str, Any]]) -> str:
    """Documents and characters after each stage: one plot each (the stage names on both),
    stacked, so that no panel's labels run into the other's."""
    import matplotlib.pyplot as plt

    labels = [s["label"] for s in stages]
    out = []
    for key, title, color in (
        ("docs_out", "documents after each stage", "#4878a8"),
        ("chars_out", "characters after each stage", "#6a9a58"),
    ):
        fig, ax = plt.subplots(figsize=(9, 0.24 * len(stages) + 0.9), layout="constrained")
        _bars(ax, labels, [s[key] for s in stages], color)
        ax.set_title(title, fontsize=10)
        out.append(_svg(fig, title))
    return "".join(out)


def _drops(items: list[list[Any]]) -> str:
    import matplotlib.pyplot as plt

    if not items:
        return "<p>No document was dropped.</p>"
    items = items[::-1]  # largest first, at the top
    fig, ax = plt.subplots(figsize=(9, 0.24 * len(items) + 0.9), layout="constrained")
    _bars(ax, [k for k, _ in items], [n for _, n in items], "#c05050")
    ax.set_title("documents dropped, by stage and reason", fontsize=10)
    return _svg(fig, "documents dropped, by stage and reason")


def _categories(title: str, groups: dict[str, list[list[Any]]]) -> str:
    """One horizontal bar panel per group of (name, count) pairs (e.g. documents per language
    and per script), side by side."""
    import matplotlib.pyplot as plt

    groups = {k: v for k, v in groups.items() if v}
    if not groups:
        return f"<p>{html.escape(title)}: no data</p>"
    tallest = max(len(v) for v in groups.values())
    fig, axes = plt.subplots(
        1, len(groups), figsize=(9, 0.24 * tallest + 1.2), squeeze=False, layout="constrained"
    )
    for ax, (name, items) in zip(axes[0], groups.items(), strict=True):
        _bars(ax, [str(k) for k, _ in items], [n for _, n in items], "#4878a8")
        ax.set_title(name, fontsize=10)
    fig.suptitle(title, fontsize=10)
    return _svg(fig, title)


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


def spec_key(spec: dict[str, Any]) -> str:
    return json.dumps(spec, sort_keys=True, ensure_ascii=False)


def render_plot(spec: dict[str, Any]) -> str:
    """The HTML of one plot (inline SVG, or a line of text when there is nothing to draw)."""
    _style_matplotlib()
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


def _drop_table(stats: dict[str, Any], examples: dict[tuple[str, str], list[dict[str, Any]]]) -> str:
    """Drops by stage and reason, largest first: count, share of the documents read, where the
    first one came from; each row opens (``<details>``) on example documents: id, score, detail
    and the start of the text."""
    read = max(stats["totals"]["docs_in"], 1)
    rows = sorted(
        (
            (s["label"], r, n, s.get("first_drop", {}).get(r, ""))
            for s in stats["stages"]
            for r, n in s["drops"].items()
        ),
        key=lambda x: -x[2],
    )
    if not rows:
        return ""
    out = [
        "<table class='drops'><tr><th>stage / reason</th><th>documents</th><th>of read</th>"
        "<th>first</th></tr>"
    ]
    for label, reason, n, first in rows:
        found = examples.get((label, reason), [])
        cell = html.escape(f"{label} / {reason}")
        if found:
            items = "".join(
                "<div class='example'><div class='meta'>"
                + html.escape(
                    " · ".join(
                        str(x)
                        for x in (
                            rec.get("id", ""),
                            f"score {rec['score']:.4g}" if isinstance(rec.get("score"), int | float) else "",
                            rec.get("detail", ""),
                        )
                        if x
                    )
                )
                + f"</div><pre>{html.escape(str(rec.get('text', ''))[:600])}</pre></div>"
                for rec in found
            )
            cell = f"<details><summary>{cell}</summary>{items}</details>"
        out.append(
            f"<tr><td class='reason'>{cell}</td><td>{n:,}</td><td>{100 * n / read:.2f}%</td>"
            f"<td class='where'>{html.escape(first)}</td></tr>"
        )
    return "".join(out) + "</table>"


def _cards(stats: dict[str, Any]) -> str:
    totals = stats["totals"]
    read = totals["docs_in"]
    kept = totals["kept"]
    cards = [
        ("documents read", f"{read:,}"),
        ("kept", f"{kept:,}" + (f" ({100 * kept / read:.1f}%)" if read else "")),
        ("dropped", f"{totals['dropped']:,}"),
        ("input", f"{stats['input']['files']} files, {stats['input']['bytes'] / 1e6:,.1f} MB"),
        ("tasks", f"{stats['input']['tasks']}"),
    ]
    return (
        "<div class='cards'>"
        + "".join(
            f"<div class='card'><div class='value'>{html.escape(v)}</div>"
            f"<div class='name'>{html.escape(k)}</div></div>"
            for k, v in cards
        )
        + "</div>"
    )


def render(
    stats: dict[str, Any],
    manifest: dict[str, Any],
    drawn: dict[str, str] | None = None,
    examples: dict[tuple[str, str], list[dict[str, Any]]] | None = None,
) -> str:
    """The page. ``drawn``: plots drawn ahead of time (:func:`render_plots`); a plot whose spec
    is not among them is drawn here. ``examples``: rejected records per (stage label, reason)
    (:func:`rejected_examples`)."""
    drawn = drawn or {}
    specs = plot_specs(stats)
    plots = [drawn.get(spec_key(spec)) or render_plot(spec) for spec in specs]
    funnel, drops, lengths = plots[:3]
    wide: dict[str, list[str]] = {}  # full-width plots of a stage (categories)
    per_stage: dict[str, list[str]] = {}  # histograms, side by side
    for spec, plot in zip(specs[3:], plots[3:], strict=True):
        (wide if spec["kind"] == "categories" else per_stage).setdefault(spec["stage"], []).append(plot)
    stages = stats["stages"]
    parts = [
        f"<h1>dataprep report: {html.escape(stats['recipe']['name'])}</h1>",
        f"<p class='sub'>recipe hash <code>{stats['recipe']['hash'][:16]}</code></p>",
        _cards(stats),
        *(
            [f"<p class='outcome'><b>The run failed:</b> {html.escape(stats['outcome']['message'])}</p>"]
            if stats.get("outcome")
            else []
        ),
        "<nav>"
        + " · ".join(
            f"<a href='#{a}'>{t}</a>"
            for a, t in (
                ("funnel", "funnel"),
                ("drops", "drops"),
                ("lengths", "lengths"),
                ("stages", "stages"),
                ("manifest", "manifest"),
            )
        )
        + "</nav>",
        "<h2 id='funnel'>Funnel</h2>",
        funnel,
        _table(
            [
                [
                    s["label"],
                    s["kind"],
                    f"{s['docs_in']:,}",
                    f"{s['docs_out']:,}",
                    f"{sum(s['drops'].values()):,}",
                    f"{s['chars_in']:,}",
                    f"{s['chars_out']:,}",
                ]
                for s in stages
            ],
            ["stage", "kind", "docs in", "docs out", "dropped", "chars in", "chars out"],
        ),
        "<h2 id='drops'>Drops by reason</h2>",
        drops,
        _drop_table(stats, examples or {}),
        "<h2 id='lengths'>Document length</h2>",
        lengths,
        "<h2 id='stages'>Stages</h2>",
    ]
    for s in stages:
        counters = [[k, f"{v:,}"] for k, v in s["counters"].items() if not k.startswith(CATEGORY_PREFIXES)]
        body = per_stage.get(s["label"], [])
        if not (counters or body or wide.get(s["label"]) or s.get("examples")):
            continue
        parts.append(f"<section><h3>{html.escape(s['label'])}</h3>")
        if counters:
            parts.append(_table(counters, ["counter", "value"]))
        parts += wide.get(s["label"], [])
        if body:
            parts.append(f"<div class='plots'>{''.join(body)}</div>")
        if s.get("examples"):
            parts.append(_examples(s["label"], s["examples"]))
        parts.append("</section>")
    problems = stats["input"]["problem_samples"]
    if problems or stats["input"]["file_notes"]:
        parts.append("<h2>Input problems</h2>")
        rows = [[n["kind"], n["file"], n["message"]] for n in stats["input"]["file_notes"]]
        rows += [[kind, it["where"], it["message"]] for kind, items in problems.items() for it in items]
        parts.append(_table(rows, ["kind", "where", "message"]))
    shards = {k: v for k, v in manifest.items() if k not in ("inputs",)}
    parts += [
        "<h2 id='manifest'>Manifest</h2>",
        "<details><summary>manifest.json (without the inputs)</summary>"
        f"<pre>{html.escape(json.dumps(shards, ensure_ascii=False, indent=1)[:20000])}</pre></details>",
    ]
    style = (
        "body{font-family:'DejaVu Sans','Noto Sans CJK SC','WenQuanYi Zen Hei',sans-serif;"
        "max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
        "h1{margin-bottom:0}.sub{color:#666;margin-top:.2em}nav{margin:1em 0;font-size:14px}"
        "h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}"
        "section{border-left:3px solid #e4e8ee;padding-left:1em;margin:1.2em 0}"
        ".cards{display:flex;flex-wrap:wrap;gap:.8em;margin:1em 0}"
        ".card{background:#f4f6f9;border-radius:6px;padding:.6em 1em;min-width:8em}"
        ".card .value{font-size:20px;font-weight:bold}.card .name{color:#666;font-size:12px}"
        "table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:2px 8px;font-size:13px;text-align:right;vertical-align:top}"
        "td:first-child,th:first-child{text-align:left}td.where{text-align:left;font-size:12px;color:#555}"
        "pre{background:#f6f6f6;padding:.6em;font-size:12px;white-space:pre-wrap;word-break:break-all}"
        "summary{cursor:pointer}.example{margin:.4em 0 .8em}.example .meta{font-size:12px;color:#555}"
        "figure{margin:.6em 0}figure svg{max-width:100%;height:auto}"
        ".plots{display:flex;flex-wrap:wrap;gap:0 1em}.plots figure{flex:1 1 460px;max-width:520px}"
        "table.examples td{text-align:left;vertical-align:top;white-space:pre-wrap;max-width:360px;"
        "font-size:12px}mark{background:#ffd966}"
        ".outcome{background:#fbe3e3;border:1px solid #c05050;padding:.6em}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>dataprep report</title>"
        f"<style>{style}</style></head><body>{''.join(parts)}</body></html>"
    )


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
    write_text_atomic(path, render(stats, manifest, drawn, rejected_examples(out)))
    return path
