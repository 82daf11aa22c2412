"""The record of a training run (``run.json`` in its output directory) and ``compare``.

run.json (schema in docs/mixing.md): ``config`` (resolved), ``data`` (per prepared output: path,
weight, name, sha256 of its manifest.json, its ``mix`` block and source names, rows), ``tokenizer``
(the manifest's entry, without its round-trip examples), ``code_version`` (``git describe`` of
the checkout, else the package version), ``metrics_file``, ``steps``, ``samples``,
``tokens_seen``, ``final`` (mean train loss of the last FINAL_STEPS steps, overall and per
source), ``eval`` (the last eval record), ``wall_time_s`` (summed over the processes that ran
it, resumptions included), ``final_checkpoint`` and ``status`` (done | stopped).

``python pretrain/run.py compare RUN...`` prints one column per run (mix, steps, final loss per
source, eval loss) and writes the runs' loss curves as an SVG (``--plot``).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
FINAL_STEPS = 10
REPO = Path(__file__).resolve().parent.parent


def code_version() -> str:
    """``git describe --always --dirty`` of the checkout this code runs from, else the version."""
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--tags"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=10,
        )
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    from dataprep import __version__

    return f"dataprep {__version__}"


def manifest_identity(path: str | Path) -> dict[str, Any]:
    """sha256 of an output's manifest.json, its mix block, source names and tokenizer entry."""
    from dataprep.formats.manifest import find_manifest

    file = find_manifest(path)
    blob = file.read_bytes()
    manifest = json.loads(blob)
    tokenizer = {k: v for k, v in (manifest.get("tokenizer") or {}).items() if k != "roundtrip"}
    return {
        "manifest_sha256": hashlib.sha256(blob).hexdigest(),
        "mix": manifest.get("mix"),
        "sources": (manifest.get("shards") or {}).get("sources"),
        "tokenizer": tokenizer,
    }


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(ln) for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]


def final_losses(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean train loss of the last FINAL_STEPS step records, overall and per source."""
    steps = [r for r in records if r.get("loss") is not None][-FINAL_STEPS:]
    out: dict[str, Any] = {"steps": [r["step"] for r in steps[:1] + steps[-1:]]}
    out["loss"] = sum(r["loss"] for r in steps) / len(steps) if steps else None
    by: dict[str, list[float]] = {}
    for r in steps:
        for label, value in (r.get("loss_by_source") or {}).items():
            if value is not None:
                by.setdefault(label, []).append(value)
    out["loss_by_source"] = {k: sum(v) / len(v) for k, v in sorted(by.items())}
    return out


def write_run_record(output: Path, record: dict[str, Any]) -> Path:
    """Write ``output``/run.json: ``record`` plus what the metrics file says (final losses, last
    eval), the wall time of earlier processes of this run added to this one's."""
    path = output / "run.json"
    earlier = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    records = read_jsonl(output / record["metrics_file"])
    evals = [r for r in records if "eval_loss" in r]
    full = {
        "schema_version": SCHEMA_VERSION,
        **record,
        "final": final_losses(records),
        "eval": evals[-1] if evals else None,
        "wall_time_s": round(float(earlier.get("wall_time_s", 0.0)) + float(record["wall_time_s"]), 3),
    }
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(full, indent=1, ensure_ascii=False), encoding="utf-8")
    tmp.replace(path)
    return path


def load_run(path: str | Path) -> dict[str, Any]:
    """run.json of a run directory (or the file itself)."""
    p = Path(path)
    p = p / "run.json" if p.is_dir() else p
    if not p.exists():
        raise FileNotFoundError(f"{path}: no run.json (is it the --output of a finished training run?)")
    run = json.loads(p.read_text(encoding="utf-8"))
    run["_dir"] = str(p.parent)
    return run


def _mix_text(run: dict[str, Any]) -> list[str]:
    lines = []
    for d in run["data"]:
        mix = d.get("mix")
        shares = ""
        if mix:
            shares = (
                " (" + ", ".join(f"{n} {s['achieved_share']:.3f}" for n, s in mix["sources"].items()) + ")"
            )
        lines.append(f"{d['name']} w={d['weight']:g}{shares}")
    return lines


def _fmt(v: Any) -> str:
    return "-" if v is None else f"{v:.4f}" if isinstance(v, float) else str(v)


def compare_table(runs: list[dict[str, Any]]) -> str:
    """Rows: mix, steps, samples, final loss, final loss per source, eval loss, wall time; one
    column per run."""
    names = [Path(r["_dir"]).name for r in runs]
    labels = sorted({k for r in runs for k in (r.get("final") or {}).get("loss_by_source", {})})
    rows: list[tuple[str, list[str]]] = []
    mixes = [_mix_text(r) for r in runs]
    for i in range(max(len(m) for m in mixes)):
        rows.append(("mix" if i == 0 else "", [m[i] if i < len(m) else "" for m in mixes]))
    rows.append(("steps", [str(r.get("steps")) for r in runs]))
    rows.append(("samples", [str(r.get("samples")) for r in runs]))
    rows.append(("final loss", [_fmt(r["final"]["loss"]) for r in runs]))
    for label in labels:
        rows.append((f"  {label}", [_fmt(r["final"]["loss_by_source"].get(label)) for r in runs]))
    rows.append(("eval loss", [_fmt((r.get("eval") or {}).get("eval_loss")) for r in runs]))
    for label in sorted({k for r in runs for k in ((r.get("eval") or {}).get("eval_loss_by_source") or {})}):
        rows.append(
            (
                f"  eval {label}",
                [_fmt(((r.get("eval") or {}).get("eval_loss_by_source") or {}).get(label)) for r in runs],
            )
        )
    rows.append(("wall time s", [_fmt(r.get("wall_time_s")) for r in runs]))
    rows.append(("code", [str(r.get("code_version")) for r in runs]))
    head = max(len(k) for k, _ in rows)
    widths = [max(len(n), *(len(v[i]) for _, v in rows)) for i, n in enumerate(names)]
    out = [" " * head + " | " + " | ".join(n.ljust(w) for n, w in zip(names, widths, strict=True))]
    out.append("-" * len(out[0]))
    for key, values in rows:
        out.append(
            key.ljust(head) + " | " + " | ".join(v.ljust(w) for v, w in zip(values, widths, strict=True))
        )
    return "\n".join(out)


COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def compare_svg(runs: list[dict[str, Any]], width: int = 640, height: int = 360) -> str:
    """The runs' train loss per step (lines) and eval losses (dots), one colour per run."""
    curves = []
    for r in runs:
        recs = read_jsonl(Path(r["_dir"]) / r.get("metrics_file", "metrics.jsonl"))
        train = [(x["step"], x["loss"]) for x in recs if x.get("loss") is not None]
        evals = [(x["step"], x["eval_loss"]) for x in recs if "eval_loss" in x]
        curves.append((Path(r["_dir"]).name, train, evals))
    points = [p for _, t, e in curves for p in t + e]
    if not points:
        return f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"></svg>\n'
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    y0, y1 = min(p[1] for p in points), max(p[1] for p in points)
    x1, y1 = (x1 if x1 > x0 else x0 + 1), (y1 if y1 > y0 else y0 + 1e-6)
    pad = 40

    def xy(step: float, loss: float) -> str:
        x = pad + (step - x0) / (x1 - x0) * (width - 2 * pad)
        y = height - pad - (loss - y0) / (y1 - y0) * (height - 2 * pad)
        return f"{x:.1f},{y:.1f}"

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
        'font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="black"/>',
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="black"/>',
        f'<text x="{width / 2}" y="{height - 8}" text-anchor="middle">step ({x0}..{x1})</text>',
        f'<text x="4" y="{pad - 8}">loss {y0:.3f}..{y1:.3f}</text>',
    ]
    for i, (name, train, evals) in enumerate(curves):
        colour = COLOURS[i % len(COLOURS)]
        if train:
            line = " ".join(xy(s, v) for s, v in train)
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{line}"/>')
        for s, v in evals:
            cx, cy = xy(s, v).split(",")
            parts.append(f'<circle cx="{cx}" cy="{cy}" r="3" fill="{colour}"/>')
        parts.append(f'<text x="{width - pad - 150}" y="{pad + 14 * i}" fill="{colour}">{name}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def compare_command(argv: list[str]) -> int:
    """``compare RUN... [--plot FILE.svg]``: the table on stdout, the plot written (default
    compare.svg in the current directory)."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="run.py compare", description="compare training runs (run.json)")
    ap.add_argument("runs", nargs="+", metavar="RUN", help="--output directories of training runs")
    ap.add_argument("--plot", default="compare.svg", help="SVG of the loss curves (default compare.svg)")
    args = ap.parse_args(argv)
    try:
        runs = [load_run(r) for r in args.runs]
    except (FileNotFoundError, json.JSONDecodeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(compare_table(runs))
    Path(args.plot).write_text(compare_svg(runs), encoding="utf-8")
    print(f"plot: {args.plot}")
    return 0
