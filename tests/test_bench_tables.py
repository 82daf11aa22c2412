"""The end-to-end benchmark's marginal table: fixed costs cancel out of the ratios it prints."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parent.parent / "bench"


def load_bench(name: str) -> ModuleType:
    """bench/<name>.py, imported by its file path (bench/ is scripts, not a package, and stays off
    sys.path). The bench scripts import each other by bare name (``from _measure import ...``, as
    when run as scripts): the siblings a module imports are loaded first, under those names."""
    path = BENCH / f"{name}.py"
    if name in sys.modules:
        loaded = sys.modules[name]
        assert Path(loaded.__file__ or "") == path, f"{name} is already imported from {loaded.__file__}"
        return loaded
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.module and (BENCH / f"{node.module}.py").is_file():
            load_bench(node.module)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if (BENCH / f"{alias.name}.py").is_file():
                    load_bench(alias.name)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


e2e = load_bench("bench_end_to_end")
speed = load_bench("bench_speed")
measure = load_bench("_measure")
kb_corpus = load_bench("make_kb_corpus")
Measured = measure.Measured


def _runs(one: float, two: float, bare: float) -> dict[str, Measured]:
    return {name: Measured(s, 0.0, 0, "") for name, s in ((e2e.ONE, one), (e2e.TWO, two), (e2e.BARE, bare))}


def _row(text: str, label: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"| {label} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_marginal_ratios_leave_out_fixed_costs() -> None:
    # per MB: 1 worker 0.5 s, 2 workers 0.25 s, bare 0.2 s; fixed: 10 s, 8 s, 0.5 s
    whole = _runs(10 + 0.5 * 80, 8 + 0.25 * 80, 0.5 + 0.2 * 80)
    half = _runs(10 + 0.5 * 40, 8 + 0.25 * 40, 0.5 + 0.2 * 40)
    text = e2e.marginal_table(80.0, 40.0, [whole, whole], [half, half])
    assert _row(text, e2e.ONE)[1:] == ["50.0", "30.0", "20.0", "2.00"]
    assert _row(text, e2e.TWO)[3:] == ["10.0", "4.00"]
    assert _row(text, "2 workers / 1 worker")[1:] == ["2.00", "2.00, 2.00", "≥ 1.8"]
    assert _row(text, "ours(2) / bare tokenizer (2 threads)")[1] == "0.80"
    # the whole-text ratios of the same runs still carry the fixed costs
    ratios = {r.name: r.value for r in e2e.ratios_of({n: m.seconds for n, m in whole.items()})}
    assert round(ratios["2 workers / 1 worker"], 2) == 1.79


def test_marginal_table_medians_over_rounds() -> None:
    rounds = [_runs(50, 30, 20), _runs(60, 28, 20), _runs(52, 29, 20)]
    halves = [_runs(30, 20, 10)] * 3
    text = e2e.marginal_table(80.0, 40.0, rounds, halves)
    assert _row(text, e2e.ONE)[1:4] == ["52.0", "30.0", "22.0"]  # median of 50, 60, 52
    assert _row(text, "2 workers / 1 worker")[2] == "2.00, 3.75, 2.44"


def test_marginal_table_gives_no_ratio_when_a_half_took_as_long_as_the_whole() -> None:
    runs = _runs(30, 20, 10)
    text = e2e.marginal_table(80.0, 40.0, [runs], [runs])
    assert "no ratio" in text and "2 workers / 1 worker" not in text


def test_ceilings_are_the_ratios_had_our_runs_wasted_nothing() -> None:
    seconds = {e2e.ONE: 36.0, e2e.TWO: 20.0, e2e.BARE: 13.0, e2e.RAY: 25.0, e2e.RAY_ALONE: 4.0}
    cpu = {e2e.ONE: 38.0, e2e.TWO: 40.0, e2e.BARE: 23.0}
    ratios = {r.name: r for r in e2e.ratios_of(seconds, cpu)}
    # ours on 2 cores takes at least 40 / 2 = 20 CPU-bound seconds
    assert ratios["ours(2) / bare tokenizer (2 threads)"].ceiling == 13.0 / 20.0
    assert ratios["2 workers / 1 worker"].ceiling == 36.0 / 20.0
    # Ray takes at least the local run plus its own start and stop
    assert ratios["ray / local (2 CPUs, Ray started by the run)"].ceiling == 20.0 / 24.0
    without_cpu = {r.name: r.ceiling for r in e2e.ratios_of(seconds)}
    assert without_cpu["2 workers / 1 worker"] is None  # a local ceiling needs the CPU seconds
    assert without_cpu["ray / local (2 CPUs, Ray started by the run)"] == 20.0 / 24.0


def test_result_table_prints_ceilings_and_ray_alone_apart_from_the_runs() -> None:
    def measured(seconds: float, cpu: float = 0.0) -> Measured:
        return Measured(seconds, 0.0, 0, "", cpu)

    rnd = {
        e2e.ONE: measured(36.0, 38.0),
        e2e.TWO: measured(20.0, 40.0),
        e2e.RAY: measured(25.0),
        e2e.RAY_ALONE: measured(4.0),
        e2e.BARE: measured(13.0, 23.0),
    }
    text = e2e.result_table("c", 10, 88.0, {"totals": {"kept": 9}}, [rnd], None)
    assert _row(text, "2 workers / 1 worker")[1:] == ["1.80", "1.80", "≥ 1.8", "1.80"]
    assert _row(text, "ray / local (2 CPUs, Ray started by the run)")[4] == "0.83"
    assert f"{e2e.RAY_ALONE}: 4.0 s" in text
    assert not any(line.startswith(f"| {e2e.RAY_ALONE}") for line in text.splitlines())


def test_speed_table_ratios_and_scaling_beyond_half() -> None:
    # 40 MB; per MB: 1 worker 1.0 s, 2 workers 0.5 s; fixed: 6 s at both
    case = speed.Case("zh_poetry", "deepseek", 1000, 40.0, 20.0)
    case.runs = {
        "2w": Measured(26.0, 700.0, 0, "", 20.0),
        "1w": Measured(46.0, 0.0, 0, "", 19.0),
        "half 2w": Measured(16.0, 0.0, 0, "", 10.0),
        "half 1w": Measured(26.0, 0.0, 0, "", 10.0),
        "HF": Measured(39.0, 0.0, 0, "", 40.0),
        "datatrove": Measured(130.0, 0.0, 0, "", 1.0),
    }
    case.timings = {"task_cpu_seconds": {"normalize": 4.0}, "cpu_seconds": {"pass0": 9.0, "decide.pack": 2.0}}
    row = _row("\n".join(speed.summary_table([case])), "zh_poetry")
    # MB per CPU-s, prepare / HF (wall, CPU), ours / datatrove, 2w / 1w whole and beyond half
    assert row[5] == "2.00" and row[9:11] == ["1.50", "2.00"] and row[12] == "5.00"
    assert row[14:16] == ["1.77", "2.00"]
    stages = "\n".join(speed.stage_table([case]))
    assert _row(stages, "normalize")[1:] == ["4.00", "10.0"]
    assert _row(stages, "decide.pack (phase)")[1:] == ["2.00", "20.0"]
    assert "pass0" not in stages  # a pass's CPU is its stages' and its I/O, listed per stage


def test_a_recorded_result_is_never_overwritten(tmp_path: Path) -> None:
    first = measure.write_result("speed", "Speed", "cmd one", "table one", results=tmp_path)
    second = measure.write_result("speed", "Speed", "cmd two", "table two", results=tmp_path)
    third = measure.write_result("speed", "Speed", "cmd three", "table three", results=tmp_path)
    assert len({first, second, third}) == 3
    assert second.name == first.stem + "-2.md" and third.name == first.stem + "-3.md"
    assert "table one" in first.read_text(encoding="utf-8")
    assert "table two" in second.read_text(encoding="utf-8")


def test_a_run_rewrites_its_own_result_file_only(tmp_path: Path) -> None:
    other = measure.write_result("speed", "Speed", "cmd", "someone else's", results=tmp_path)
    mine = measure.write_result("speed", "Speed", "cmd", "one case", results=tmp_path)
    again = measure.write_result("speed", "Speed", "cmd", "two cases", results=tmp_path, into=mine)
    assert again == mine != other
    assert "two cases" in mine.read_text(encoding="utf-8")
    assert "someone else's" in other.read_text(encoding="utf-8")


def _fit_case(corpus: str, docs: int, mb: float, fixed: float, per_doc: float, per_byte: float):
    def cpu(d: int, m: float) -> float:
        return fixed + per_doc * d + per_byte * m * 1e6

    case = speed.Case(corpus, "deepseek", docs, mb, mb / 2, docs // 2)
    case.runs = {
        "2w": Measured(1.0, 0.0, 0, "", cpu(docs, mb)),
        "half 2w": Measured(1.0, 0.0, 0, "", cpu(docs // 2, mb / 2)),
    }
    return case


def test_cost_fit_recovers_per_document_and_per_byte_cpu() -> None:
    # 5 s fixed, 30 µs per document, 0.2 µs per byte; documents of 77 B, 1 KB and 10 KB
    cases = [
        _fit_case("zh_poetry", 520_000, 40.0, 5.0, 30e-6, 0.2e-6),
        _fit_case("zh_kb", 100_000, 100.0, 5.0, 30e-6, 0.2e-6),
        _fit_case("zh_long", 4_000, 40.0, 5.0, 30e-6, 0.2e-6),
    ]
    (fixed, per_doc, per_byte), residual, points = speed.cost_fit(cases, "deepseek")
    assert points == 6 and residual < 1e-9
    assert abs(fixed - 5.0) < 1e-6 and abs(per_doc - 30e-6) < 1e-12 and abs(per_byte - 0.2e-6) < 1e-14
    row = _row("\n".join(speed.fit_table(cases)), "deepseek")
    assert row[1:5] == ["6", "5.00", "30.0", "0.200"]
    # two document lengths cannot separate the three terms
    assert speed.cost_fit(cases[:2], "deepseek") is None
    assert "fewer than three" in "\n".join(speed.fit_table(cases[:2]))


def test_serial_table_sums_the_phases_that_are_not_passes() -> None:
    case = speed.Case("zh_kb", "trained", 1, 1.0, 0.5)
    case.timings = {
        "seconds": {
            "plan": 0.5,
            "setup": 0.25,
            "pass0": 30.0,
            "decide.tokenize": 4.0,
            "pass1": 9.0,
            "total": 100.0,
        }
    }
    row = _row("\n".join(speed.serial_table([case])), "zh_kb")
    assert row[2:6] == ["100.0", "4.75", "4.00", "3.00"]
    assert row[6].startswith("decide.tokenize 4.00, plan 0.50")


def test_the_recombined_corpus_is_seeded_and_sized(tmp_path: Path) -> None:
    import json

    poem = "床前明月光，疑是地上霜。举头望明月！低头思故乡？\n春眠不觉晓；"
    pool = [s for s in kb_corpus.SENTENCE_END.split(poem) if s]
    assert pool == ["床前明月光，疑是地上霜。", "举头望明月！", "低头思故乡？", "\n", "春眠不觉晓；"]
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    docs, size = kb_corpus.write_recombined(pool, a, 20_000, (3, 40), seed=7)
    assert kb_corpus.write_recombined(pool, b, 20_000, (3, 40), seed=7) == (docs, size)
    assert a.read_bytes() == b.read_bytes()
    texts = [json.loads(line)["text"] for line in a.read_text(encoding="utf-8").splitlines()]
    assert len(texts) == docs and sum(len(t.encode()) for t in texts) == size >= 20_000
    assert size - len(texts[-1].encode()) < 20_000  # stops at the first document past the size
