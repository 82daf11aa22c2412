"""The fast-tier guard of conftest.py: a test not marked e2e that runs the pipeline fails, however it
ran it; one marked e2e, or whose prepare is refused before the first pass, does not. Each case runs
in a pytest session of its own (a child process: audit hooks cannot be removed), with this conftest."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).resolve().parent / "conftest.py"

CASES = """
import subprocess
import sys

import pytest
from conftest import SMALL_RECIPE, prepare_cmd, run, write_recipe


def corpus(tmp_path):
    (tmp_path / "in.txt").write_text("one line of text\\n" * 20, encoding="utf-8")
    return tmp_path / "in.txt"


def test_unmarked_in_process(tmp_path):
    run([corpus(tmp_path)], tmp_path / "out")


def test_unmarked_exception_caught(tmp_path):
    try:
        run([corpus(tmp_path)], tmp_path / "out")
    except Exception:
        pass


def test_unmarked_child_process(tmp_path):
    recipe = write_recipe(tmp_path / "r.yaml", SMALL_RECIPE)
    subprocess.run(prepare_cmd(corpus(tmp_path), tmp_path / "out", recipe), check=False)


def test_unmarked_console_script(tmp_path):
    subprocess.run(["dataprep", "prepare", str(corpus(tmp_path)), "--out", str(tmp_path / "o")])


def test_unmarked_refused_before_the_first_pass(tmp_path):
    from dataprep.executor import RunError

    with pytest.raises(RunError):  # no input at all: refused by check_request
        run([], tmp_path / "out")


def test_unmarked_other_commands(tmp_path):
    r = subprocess.run([sys.executable, "-c", "print('prepare')"], capture_output=True, text=True)
    assert r.stdout == "prepare\\n"


@pytest.mark.e2e
def test_marked_child_process(tmp_path):
    recipe = write_recipe(tmp_path / "r.yaml", SMALL_RECIPE)
    r = subprocess.run(prepare_cmd(tmp_path / "missing.txt", tmp_path / "out", recipe))
    assert r.returncode != 0  # refused by the run itself, not by the guard
"""


def test_the_guard_fails_unmarked_pipeline_runs_only(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST.read_text(encoding="utf-8"))
    pytester.makeini("[pytest]\nmarkers =\n    e2e: end to end\n")
    pytester.makepyfile(test_cases=CASES)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA")
    outcomes = {
        line.split("::")[1].split()[0]: line.split()[0]
        for line in result.outlines
        if line.startswith(("PASSED", "FAILED", "ERROR")) and "::" in line
    }
    assert outcomes == {
        "test_unmarked_in_process": "FAILED",
        "test_unmarked_exception_caught": "FAILED",
        "test_unmarked_child_process": "FAILED",
        "test_unmarked_console_script": "FAILED",
        "test_unmarked_refused_before_the_first_pass": "PASSED",
        "test_unmarked_other_commands": "PASSED",
        "test_marked_child_process": "PASSED",
    }, result.stdout.str()
    assert "test_unmarked_in_process ran the pipeline's passes" in result.stdout.str()
    assert "is not marked e2e: mark it @pytest.mark.e2e" in result.stdout.str()
