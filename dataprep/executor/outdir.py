"""OUT around a run: one run at a time (its lock), the request checked, an earlier run resumed
or started over (its recorded outputs, its inputs' content re-checked by sha256), and what is
cleaned up after: half-written files of a stopped run, the intermediates of a complete one.

Nothing here deletes an entry of OUT that no run of dataprep recorded as its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dataprep.docstore import WorkMismatch, refused
from dataprep.executor.errors import RunError, UsageError
from dataprep.executor.passes import COMPLETE, OUTPUT_ENTRIES, OUTPUTS_RECORD, RunDir
from dataprep.executor.sweep import remove_all
from dataprep.inputs import input_holding
from dataprep.io import file_sha256, read_work_json
from dataprep.plan import Plan
from dataprep.progress import log
from dataprep.recipe import Recipe

LOCK = ".lock"


@contextlib.contextmanager
def run_lock(out: Path) -> Iterator[None]:
    """Hold ``OUT/.lock`` (pid, host, start time) for the block: one run per OUT. A lock left by a
    process of this host that no longer exists is taken over; a live holder (or one on another
    host) makes this raise RunError naming it. The lock is removed on leaving, if still ours."""
    out.mkdir(parents=True, exist_ok=True)
    lock = out / LOCK
    host = socket.gethostname()
    mine = {"pid": os.getpid(), "host": host, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    staged = out / f".lock.{os.getpid()}"  # written whole, then linked: a lock is never seen empty
    staged.write_text(json.dumps(mine))
    try:
        for _ in range(2):
            try:
                os.link(staged, lock)
            except FileExistsError:
                try:
                    holder = json.loads(lock.read_text())
                except (OSError, ValueError):
                    holder = {}
                pid = holder.get("pid")
                if holder.get("host") == host and isinstance(pid, int) and not _alive(pid):
                    log(f"{lock}: taking over the lock of process {pid}, which no longer runs")
                    lock.unlink(missing_ok=True)
                    continue
                raise RunError(
                    f"{lock}: another run is writing into {out} (pid {holder.get('pid')} on "
                    f"{holder.get('host')}, since {holder.get('started')}); wait for it to end, or "
                    "remove the lock if that process is gone"
                ) from None
            break
        else:
            raise RunError(f"{lock}: could not take the lock of {out}; another run keeps taking it over")
    finally:
        staged.unlink(missing_ok=True)
    try:
        yield
    finally:
        try:
            if json.loads(lock.read_text()).get("pid") == os.getpid():
                lock.unlink()
        except (OSError, ValueError):
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _recorded_outputs(run: RunDir) -> set[str]:
    """The entries of OUT that the previous run there recorded as its own."""
    record = run.work / OUTPUTS_RECORD
    try:
        names = json.loads(record.read_text())
    except (OSError, ValueError):
        return set()
    return {n for n in names if n in OUTPUT_ENTRIES}  # never more than dataprep's own names


INPUTS_SHA256 = "inputs_sha256.json"  # in OUT/work once complete: {rel: sha256} of every input


def changed_inputs(run: RunDir) -> list[str]:
    """Input files (their ``rel``) whose content differs from what the run in OUT trusts of them
    (whatever their size and time), or which are gone. Read and compared: after a complete run,
    every input whole (work/inputs_sha256.json); else the files planning hashed whole
    (``Plan.sha256``) and every byte range that a completed pass-0 task read (its
    :meth:`RunDir.input_hashes`), and nothing else: a range no completed task read is checked
    by the task that reads it (:class:`InputChanged`, recorded by :meth:`RunDir.changed`)."""
    plan_file = run.work / "plan.json"
    if not plan_file.exists():
        return []
    changed: dict[str, None] = {}
    for record in sorted((run.work / "changed").glob("*.json")):
        with contextlib.suppress(OSError, ValueError, KeyError):
            changed[json.loads(record.read_text())["file"]] = None
    plan = Plan.from_json(read_work_json(plan_file)["plan"])
    ranges: list[tuple[str, str, int, int, str | None]] = []  # (rel, path, start, end, sha256)
    complete = run.work / INPUTS_SHA256
    if (run.work / COMPLETE).exists() and complete.exists():
        recorded = read_work_json(complete)
        ranges = [(f.rel, f.path, 0, -1, recorded.get(f.rel)) for f in plan.files]
    else:
        ranges = [(f.rel, f.path, 0, -1, plan.sha256[f.rel]) for f in plan.files if f.rel in plan.sha256]
        by_path = {f.path: f.rel for f in plan.files}
        for t in plan.task_ids:
            for path, start, end, digest in _read_ranges(run, t):
                if path in by_path:  # else a chunk of a decompressed file (in plan.sha256)
                    ranges.append((by_path[path], path, start, end, digest))
    for rel, path, start, end, digest in ranges:
        if rel in changed:
            continue
        try:
            now: str | None = file_sha256(path, start, end)
        except OSError:
            now = None
        if now != digest:
            changed[rel] = None
    return list(changed)


def _read_ranges(run: RunDir, task_id: str) -> list[list[Any]]:
    """The [path, start, end, sha256] input ranges a completed pass-0 task read ([] when the task
    has not completed), checked against the sha256 its marker records for the list."""
    marker = run.marker(0, task_id)
    if not marker.exists():
        return []
    recorded = json.loads(marker.read_text()).get("inputs_sha256")
    listing = run.input_hashes(task_id)
    try:
        data = listing.read_bytes()
    except OSError:
        data = b""
    if not isinstance(recorded, str) or hashlib.sha256(data).hexdigest() != recorded:
        raise refused(listing, "its sha256 differs from the one its completion marker records")
    return json.loads(data)


def input_sha256(run: RunDir, plan: Plan) -> dict[str, str | None]:
    """The sha256 of every input file as this run read it, by ``rel``: from planning
    (``Plan.sha256``, ``Plan.read_sha256``) or from the pass-0 task that read the file whole
    (a range [0, size)); None for a file nobody read."""
    out: dict[str, str | None] = {f.rel: None for f in plan.files}
    out.update(plan.read_sha256)
    out.update(plan.sha256)
    by_path = {f.path: f for f in plan.files}
    for t in plan.task_ids:
        for path, start, end, digest in _read_ranges(run, t):
            f = by_path.get(path)
            if f is not None and start == 0 and end == f.size:
                out[f.rel] = digest
    return out


def prepare_out(
    run: RunDir, fingerprint: dict[str, Any], overwrite: bool = False, resume_only: bool = False
) -> bool:
    """Make OUT ready; True when resuming a compatible earlier run. Starting over where an earlier
    run left work or outputs needs ``overwrite`` (else RunError listing what would go) and removes
    only what that run recorded as its own; ``resume_only`` refuses anything but resuming. An entry
    of OUT that no run recorded is never touched; one that carries a name of dataprep's outputs
    makes the run refuse (the outputs would replace it)."""
    state_file = run.work / "run.json"
    why = ""
    if state_file.exists():
        previous = json.loads(state_file.read_text())
        if {k: previous.get(k) for k in fingerprint} != fingerprint:
            why = "the recipe, seed or inputs (their sizes or times) changed since the last run there"
        else:
            try:
                changed = changed_inputs(run)
            except WorkMismatch as e:  # a listing of input hashes that its marker does not vouch for
                why = str(e).split(";", 1)[0]
            else:
                if not changed:
                    return True
                why = f"the content of {', '.join(changed[:3])} changed since the last run there (sha256)"
    ours = _recorded_outputs(run) if state_file.exists() else set()
    present = {p.name for p in run.out.iterdir()} if run.out.exists() else set()
    clashing = sorted(n for n in present & set(OUTPUT_ENTRIES) if n not in ours)
    if not state_file.exists():
        foreign = sorted(n for n in present if n not in ("work", ".final", LOCK))
        if foreign:
            raise RunError(
                f"{run.out} already holds files that dataprep did not write ({', '.join(foreign[:5])}); "
                "choose another --out"
            )
    elif clashing:
        raise RunError(
            f"{run.out} holds {', '.join(clashing)}, which the last run there did not write and this "
            "run's outputs would replace; move it away or choose another --out"
        )
    if why:
        if resume_only:
            raise RunError(f"{run.out}: {why}; not resuming (--resume-only); rerun without it to start over")
        doomed = sorted(ours | ({"work"} if run.work.exists() else set()) | ({".final"} & present))
        if not overwrite:
            raise RunError(
                f"{run.out}: {why}; starting over would delete {', '.join(doomed)}; "
                "rerun with --overwrite to do so, or choose another --out"
            )
        log(f"{run.out}: {why}; starting over (deleting {', '.join(doomed)})")
        for name in doomed:
            path = run.out / name
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
    elif resume_only and not state_file.exists():
        raise RunError(f"{run.out}: no run to resume there (--resume-only)")
    shutil.rmtree(run.final, ignore_errors=True)
    run.work.mkdir(parents=True, exist_ok=True)
    return False


def check_request(inputs: list[str], out: str | Path, recipe: Recipe) -> None:
    """RunError unless the run is well asked for: INPUTs xor the recipe's ``sources:``, OUT not a
    file and not inside an input. Checked before OUT is created or locked."""
    if recipe.sources and inputs:
        raise UsageError("the recipe lists its inputs under 'sources:'; give no INPUT")
    if not recipe.sources and not inputs:
        raise UsageError("give at least one INPUT (or a recipe with 'sources:')")
    resolved = Path(out).resolve()
    if resolved.exists() and not resolved.is_dir():
        raise RunError(f"--out {out} is a file, not a directory: give a directory (created when missing)")
    args = [a for s in recipe.sources for a in s.inputs] if recipe.sources else inputs
    holder = input_holding(resolved, args)
    if holder is not None:
        raise RunError(
            f"--out {out} is inside the input {holder}: give an output directory outside every input"
        )


_TEMPORARY = re.compile(r"^\..+\.tmp\d+$")  # how DocWriter, RejectedWriter and atomic_write name them


def remove_temporaries(run: RunDir) -> None:
    """Delete the half-written files of a stopped run: OUT/.final and every ``.NAME.tmpPID`` file
    under OUT/work (completed files, markers and the user's files are left alone)."""
    shutil.rmtree(run.final, ignore_errors=True)
    if not run.work.is_dir():
        return
    for root, _, names in os.walk(run.work):
        for name in names:
            if _TEMPORARY.match(name):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(root, name))


def disk_use(path: Path) -> int:
    """Bytes of disk the files under ``path`` occupy (allocated blocks; hard links counted once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def clean_work(run: RunDir) -> None:
    """Empty OUT/work of the intermediates of a complete run: run.json, COMPLETE, plan.json, the
    inputs' sha256 and the record of the outputs stay (they make a rerun a no-op, show a changed
    input, and name what a later start over may delete)."""
    kept = ("run.json", COMPLETE, OUTPUTS_RECORD, "plan.json", INPUTS_SHA256)
    remove_all([entry for entry in run.work.iterdir() if entry.name not in kept])
