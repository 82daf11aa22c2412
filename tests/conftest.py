"""Shared helpers: write small corpora and recipes, run the pipeline in-process; the guard that keeps
the fast tier (``-m "not e2e and not slow"``, ``make test-fast``) free of pipeline runs."""

from __future__ import annotations

import gzip
import json
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "sample_corpus"

# A fast recipe for tests: the foundation chain with a tiny tokenizer.
SMALL_RECIPE: dict[str, Any] = {
    "name": "small",
    "seed": 0,
    "input": {"on_error": "skip"},
    "stages": [
        {"normalize": {}},
        {"exact_dedup": {}},
        {"tokenize": {"tokenizer": "train", "vocab_size": 400, "train_sample_bytes": 200_000}},
        {"pack": {"seq_length": 64}},
    ],
}


class PipelineRunInFastTier(Exception):
    """A test not marked e2e ran the pipeline: its passes in this process, or `dataprep prepare` in a
    child process."""


_guarded_test: list[str] = []  # the node id of the running test while it is guarded (none for e2e)
_pipeline_runs: dict[str, list[str]] = {}  # node id -> how it ran the pipeline


def _pipeline_ran(how: str) -> None:
    if not _guarded_test:
        return
    nodeid = _guarded_test[0]
    _pipeline_runs.setdefault(nodeid, []).append(how)
    raise PipelineRunInFastTier(
        f"{nodeid} ran {how} but is not marked e2e: mark it @pytest.mark.e2e "
        "(or the file, pytestmark = pytest.mark.e2e); docs/architecture.md, Tests"
    )


def _is_prepare_command(argv: Sequence[Any]) -> bool:
    """`dataprep prepare ...` or `python -m dataprep.cli prepare ...` (or `make prepare`)."""
    words = [os.fsdecode(a) if isinstance(a, (str, bytes, os.PathLike)) else "" for a in argv]
    if "prepare" not in words:
        return False
    first = words.index("prepare")
    return any(w == "dataprep.cli" or Path(w).name in ("dataprep", "make") for w in words[:first])


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "subprocess.Popen" and _guarded_test:
        argv = args[1]
        if isinstance(argv, (str, bytes)):
            argv = os.fsdecode(argv).split()
        if _is_prepare_command(argv or ()):
            _pipeline_ran("`dataprep prepare` in a child process")


def pytest_configure(config: pytest.Config) -> None:
    """Install the fast-tier guard: every run of the pipeline's passes in this process goes through
    ``dataprep.executor.run.run_passes`` (the name the driver calls it by; a prepare refused before
    its first pass does not count); every child process goes through the ``subprocess.Popen`` audit
    event."""
    from dataprep.executor import run as executor_run

    if getattr(executor_run.run_passes, "fast_tier_guard", False):
        return
    run_passes = executor_run.run_passes

    def guarded_run_passes(*args: Any, **kwargs: Any) -> Any:
        _pipeline_ran("the pipeline's passes (dataprep.executor.prepare)")
        return run_passes(*args, **kwargs)

    guarded_run_passes.fast_tier_guard = True  # type: ignore[attr-defined]
    executor_run.run_passes = guarded_run_passes
    sys.addaudithook(_audit)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """Guard a test that is not marked e2e from its fixtures' set-up (a session fixture that runs
    prepare counts against the first test that asks for it) to its teardown."""
    _guarded_test.clear()
    if item.get_closest_marker("e2e") is None:
        _guarded_test.append(item.nodeid)
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    yield
    _guarded_test.clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Fail the test even when it caught PipelineRunInFastTier."""
    outcome = yield
    report = outcome.get_result()
    runs = _pipeline_runs.get(item.nodeid)
    if runs and report.when == "call" and report.passed:
        report.outcome = "failed"
        report.longrepr = f"{item.nodeid} ran {runs[0]} but is not marked e2e"


def skip_or_fail(reason: str, required_by: str) -> NoReturn:
    """Skip the calling test for ``reason`` (something it needs is missing), or fail it when the
    environment variable ``required_by`` is "1": .ci/run sets DATAPREP_REQUIRE_BROWSER and
    DATAPREP_REQUIRE_CONSUMERS so that CI cannot pass by skipping."""
    if os.environ.get(required_by) == "1":
        pytest.fail(f"{reason}, but {required_by}=1 requires it")
    pytest.skip(reason)


def write_recipe(path: Path, recipe: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(recipe, allow_unicode=True), encoding="utf-8")
    return path


def recipe_with(**input_options: Any) -> dict[str, Any]:
    r = json.loads(json.dumps(SMALL_RECIPE))
    r["input"].update(input_options)
    return r


def run(
    inputs: list[Path | str], out: Path, recipe: dict[str, Any] | None = None, workers: int = 1, **kw: Any
) -> dict[str, Any]:
    from dataprep.executor import prepare
    from dataprep.recipe import load_recipe

    out.mkdir(parents=True, exist_ok=True)
    recipe_path = write_recipe(out.parent / f".{out.name}.recipe.yaml", recipe or SMALL_RECIPE)
    return prepare(
        [str(p) for p in inputs], out, load_recipe(str(recipe_path)), workers=workers, quiet=True, **kw
    )


def jsonl_bytes(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")


def write_gz(path: Path, data: bytes) -> Path:
    with gzip.GzipFile(path, "wb", mtime=0) as f:
        f.write(data)
    return path


def write_zst(path: Path, data: bytes) -> Path:
    import zstandard

    path.write_bytes(zstandard.ZstdCompressor().compress(data))
    return path


def stage_stats(stats: dict[str, Any], label: str) -> dict[str, Any]:
    return next(s for s in stats["stages"] if s["label"] == label)


def read_stats(out: Path) -> dict[str, Any]:
    return json.loads((out / "stats.json").read_text(encoding="utf-8"))


def output_bytes(out: Path) -> dict[str, bytes]:
    """Every deterministic output file (all of OUT but work/ and timings.json), by relative path."""
    files = {}
    for p in sorted(out.rglob("*")):
        rel = p.relative_to(out).as_posix()
        if p.is_file() and not rel.startswith("work/") and rel != "timings.json":
            files[rel] = p.read_bytes()
    return files


def prepare_cmd(inputs: Path, out: Path, recipe: Path, *extra: str) -> list[str]:
    """The `dataprep prepare` command line run as a separate process (for kill and resume tests)."""
    return [
        sys.executable,
        "-m",
        "dataprep.cli",
        "prepare",
        str(inputs),
        "--out",
        str(out),
        "--recipe",
        str(recipe),
        "--quiet",
        *extra,
    ]


def assert_same_outputs(out: Path, expected: Path) -> None:
    """Every deterministic output file of ``out`` equals ``expected``'s, byte for byte."""
    ours, theirs = output_bytes(out), output_bytes(expected)
    assert sorted(ours) == sorted(theirs)
    for name in theirs:
        assert ours[name] == theirs[name], name


@pytest.fixture
def docs_zh() -> list[str]:
    """Real lines from the sample corpus (reviews), distinct."""
    lines = (SAMPLE / "reviews" / "reviews.txt").read_text(encoding="utf-8").splitlines()
    return list(dict.fromkeys(x for x in lines if len(x) > 20))[:200]


@pytest.fixture(scope="session")
def default_sample_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """OUT of the default recipe on all of sample_corpus/ (2 workers), prepared once per session:
    tests read it, none writes into it."""
    from dataprep.executor import prepare
    from dataprep.recipe import load_recipe

    out = tmp_path_factory.mktemp("default_sample") / "out"
    prepare([str(SAMPLE)], out, load_recipe("default"), workers=2, quiet=True)
    return out
