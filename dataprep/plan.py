"""From command-line inputs to an ordered list of tasks.

Inputs are files, directories (walked recursively, hidden entries skipped) and globs. Files are
ordered by their path relative to the input root, so task order, document ids and therefore
outputs do not depend on the file system's listing order or on the worker count.
"""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import errno
import glob
import hashlib
import json
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dataprep import stage as registry
from dataprep.io import (
    bom_encoding,
    compression_of,
    decompress_chunks,
    file_sha256,
    guess_encoding,
    logical_suffix,
    looks_binary,
    sniff,
)
from dataprep.recipe import InputParams, Recipe
from dataprep.stage import InputSplit, ReadReport

MIN_SPLIT_BYTES = 1 << 20


class InputNotFound(FileNotFoundError):
    """A command-line input matched nothing."""


@dataclass(frozen=True)
class InputFile:
    path: str  # absolute
    rel: str  # relative to its input root; appears in document ids
    size: int
    mtime_ns: int


def _has_magic(s: str) -> bool:
    return any(c in s for c in "*?[")


def _classify(path: Path) -> tuple[os.stat_result | None, tuple[str, str] | None]:
    """(the stat of what ``path`` names, following links; or None and the note (kind, message)
    of why it is not a regular file to read: a dangling link, a link loop, a FIFO, socket or
    device, or a file that cannot be examined)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        if path.is_symlink():
            return None, ("dangling_link", f"symbolic link to {os.readlink(path)!r}, which does not exist")
        return None, ("read_error", "vanished while the inputs were listed")
    except OSError as e:
        if e.errno == errno.ELOOP:
            return None, ("link_loop", "symbolic link loop (the link leads back to itself)")
        return None, ("read_error", f"cannot examine: {e.strerror or e}")
    if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
        return st, None
    kind = (
        "a FIFO (named pipe)"
        if stat.S_ISFIFO(st.st_mode)
        else "a socket"
        if stat.S_ISSOCK(st.st_mode)
        else "a device"
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
        else "not a regular file"
    )
    return None, ("special_file", f"{kind}, not a regular file (skipped)")


def _walk(root: Path) -> Iterator[tuple[Path, os.stat_result | None, tuple[str, str] | None]]:
    """Every entry under directory ``root`` that is not a directory, with :func:`_classify`'s
    answer; hidden entries skipped; directories (symbolic links to them included) entered once
    each, by (device, inode), so a link to an ancestor ends there instead of looping."""
    seen: set[tuple[int, int]] = set()
    stack = [root]
    while stack:
        d = stack.pop()
        try:
            st = d.stat()
            names = sorted(os.listdir(d))
        except OSError as e:
            yield d, None, ("read_error", f"cannot list directory: {e.strerror or e}")
            continue
        if (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        subdirs = []
        for name in names:
            if name.startswith("."):
                continue
            path = d / name
            info, note = _classify(path)
            if info is not None and stat.S_ISDIR(info.st_mode):
                subdirs.append(path)
            else:
                yield path, info, note
        stack += reversed(subdirs)


def expand_inputs(
    args: list[str], exclude: Path | None = None, skipped: list[dict[str, str]] | None = None
) -> list[InputFile]:
    """Files named by ``args``, de-duplicated and sorted by ``rel``.

    rel is relative to the directory given (or the glob's fixed prefix, or the file's parent);
    with several arguments each rel is prefixed by the argument's own name to keep ids unique.
    Files under ``exclude`` (the output directory, when it sits inside an input) are skipped.
    Directories are walked following symbolic links, each directory once (by inode). Entries that
    are not regular files (dangling links, link loops, FIFOs, sockets, devices) never crash or
    block the walk: each is appended to ``skipped`` as a note {file, kind, message} (sorted by
    file), for :func:`make_plan` to report under the input's error policy.
    """
    found: dict[str, InputFile] = {}
    notes: dict[str, dict[str, str]] = {}
    excluded = exclude.resolve() if exclude is not None else None
    for arg in args:
        entries: list[tuple[Path, os.stat_result | None, tuple[str, str] | None]] = []
        if _has_magic(arg):
            prefix = Path(arg.split("*")[0].split("?")[0].split("[")[0])
            root = prefix if arg.endswith(os.sep) or prefix.is_dir() else prefix.parent
            for g in sorted(glob.glob(arg, recursive=True)):
                info, note = _classify(Path(g))
                if info is not None and stat.S_ISDIR(info.st_mode):
                    continue
                entries.append((Path(g), info, note))
            if not entries:
                raise InputNotFound(f"input {arg!r} matches no file")
        else:
            p = Path(arg)
            info, note = _classify(p)
            if info is not None and stat.S_ISDIR(info.st_mode):
                root = p
                entries = list(_walk(p))
            elif info is not None or (note is not None and os.path.lexists(p)):
                root, entries = p.parent, [(p, info, note)]
            else:
                raise InputNotFound(f"input {arg!r} does not exist")
        for path, info, note in entries:
            real = path.resolve() if info is not None else path.absolute()  # a loop cannot resolve
            if excluded is not None and real.is_relative_to(excluded):
                continue
            rel = path.relative_to(root).as_posix()
            if len(args) > 1:
                rel = f"{Path(arg.rstrip('/')).name or arg}/{rel}"
            if info is None:
                assert note is not None
                notes.setdefault(rel, {"file": rel, "kind": note[0], "message": note[1]})
                continue
            absolute = str(real)
            found.setdefault(absolute, InputFile(absolute, rel, info.st_size, info.st_mtime_ns))
    if skipped is not None:
        skipped += [notes[k] for k in sorted(notes)]
    return sorted(found.values(), key=lambda f: (f.rel, f.path))


def input_holding(out: Path, args: list[str]) -> str | None:
    """The first of ``args`` (files, directories, globs) whose directory holds ``out`` (or is
    it), else None: an output directory there would be read back as input on a rerun."""
    target = out.resolve()
    for arg in args:
        root = Path(arg.split("*")[0].split("?")[0].split("[")[0]) if _has_magic(arg) else Path(arg)
        if _has_magic(arg) and not root.is_dir():
            root = root.parent
        with contextlib.suppress(OSError):
            if root.is_dir() and target.is_relative_to(root.resolve()):
                return arg
    return None


def source_files(
    recipe: Recipe, exclude: Path | None = None, skipped: list[dict[str, str]] | None = None
) -> list[InputFile]:
    """The files of a recipe's ``sources:``, source by source in priority order (highest first),
    each source's files sorted as :func:`expand_inputs` sorts them, their ``rel`` prefixed by the
    source name (``name/rel``: every document id and source names its source). A file named by
    two sources is an error."""
    out: list[InputFile] = []
    owner: dict[str, str] = {}
    for src in recipe.sources_by_priority():
        notes: list[dict[str, str]] = []
        for f in expand_inputs(src.inputs, exclude=exclude, skipped=notes):
            if f.path in owner:
                raise InputNotFound(
                    f"{f.path} belongs to two sources ({owner[f.path]} and {src.name}); "
                    "give each file to one source"
                )
            owner[f.path] = src.name
            out.append(dataclasses.replace(f, rel=f"{src.name}/{f.rel}"))
        if skipped is not None:
            skipped += [{**n, "file": f"{src.name}/{n['file']}"} for n in notes]
    return out


def source_of(rel: str, names: list[str]) -> int:
    """Index in ``names`` of the source a file (its ``rel``, as :func:`source_files` made it)
    belongs to; -1 for none."""
    head = rel.split("/", 1)[0]
    return names.index(head) if head in names else -1


@dataclass
class Plan:
    """The tasks of a run and what was learnt about its input files while planning.

    tasks: input splits in their canonical order (task i has id ``t{i:05d}``).
    file_notes: per file, why it produced no task (binary, empty, unsupported, unreadable).
    sha256: per file (relative path), its SHA-256 hex digest (None when unreadable), when asked.
    """

    files: list[InputFile]
    tasks: list[InputSplit]
    file_notes: list[dict[str, str]] = field(default_factory=list)
    sha256: dict[str, str | None] = field(default_factory=dict)

    @property
    def task_ids(self) -> list[str]:
        return [f"t{i:05d}" for i in range(len(self.tasks))]

    def to_json(self) -> dict[str, Any]:
        return {
            "files": [asdict(f) for f in self.files],
            "tasks": [asdict(t) for t in self.tasks],
            "file_notes": self.file_notes,
            "sha256": self.sha256,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Plan:
        return cls(
            [InputFile(**f) for f in d["files"]],
            [InputSplit(**t) for t in d["tasks"]],
            d["file_notes"],
            d.get("sha256", {}),
        )

    def fingerprint(self) -> str:
        key = json.dumps([asdict(f) for f in self.files], sort_keys=True)
        return hashlib.sha256(key.encode()).hexdigest()


def reader_for(path: str, params: InputParams) -> type[registry.Reader] | None:
    readers = registry.readers()
    if params.format != "auto":
        return next(r for r in readers if r.name == params.format)
    suffix = logical_suffix(path)
    return next((r for r in readers if suffix in r.extensions), None)


def _scan_file(job: tuple[InputFile, str | None, Any, bool]) -> dict[str, Any]:
    """Plan one file (module level: runs on a worker): its splits at the reader parameters'
    split_bytes, or the note (kind, message) on why it has none; and its sha256 when asked (None
    when it cannot be read). Reads the file at most twice back to back (splitting, hashing)."""
    f, reader_name, reader_params, want_hash = job
    out: dict[str, Any] = {"splits": [], "note": None, "sha256": None}
    if want_hash:
        with contextlib.suppress(OSError):
            out["sha256"] = file_sha256(f.path)
    if reader_name is None:
        return out
    reader = registry.get(reader_name)
    if f.size == 0:
        out["note"] = ("empty_file", "empty file (0 bytes)")
        return out
    if reader.name != "parquet":
        try:
            head = sniff(f.path)
        except (OSError, EOFError) as e:
            out["note"] = ("read_error", f"cannot read: {e}")
            return out
        if not head:
            out["note"] = ("empty_file", "empty file (no data after decompression)")
            return out
        head, encoding_note = _as_utf8(head, getattr(reader_params, "encoding", "utf-8"))
        if encoding_note:
            out["note"] = ("not_utf8", encoding_note)
            return out
        if looks_binary(head):
            out["note"] = ("binary_file", "looks binary (control bytes or undecodable text), skipped")
            return out
    try:
        out["splits"] = reader.plan(f.path, f.rel, reader_params)  # a corrupt Parquet footer fails here
    except Exception as e:
        out["note"] = ("read_error", f"cannot plan: {type(e).__name__}: {e}")
    return out


def _as_utf8(head: bytes, encoding: str) -> tuple[bytes, str]:
    """(a file's first bytes as UTF-8, for the binary check; "" or why the file cannot be read as
    text in ``encoding``). A byte-order mark decides the encoding; without one, a head that is
    mostly not UTF-8 under the default encoding (or UTF-16/32 without a mark) is named as such
    instead of being repaired into U+FFFD garbage (or taken for binary), with the encoding
    charset-normalizer finds (bench/bench_charset.py: on real GB18030 / Big5 text it names 98% /
    100% right, at about 0.6 ms a file, asked only about such heads): the user sets
    input.encoding."""
    bom = bom_encoding(head)
    codec = bom[0] if bom else encoding
    if codecs.lookup(codec).name == "utf-8" and bom is None:
        bad = len(head) - len(head.decode("utf-8", "ignore").encode("utf-8"))
        controls = len(re.findall(rb"[\x00-\x08\x0e-\x1a\x1c-\x1f]", head))
        if bad - 3 > 0.05 * len(head) and controls <= 0.01 * len(head):  # text, not binary
            guess = guess_encoding(head, whole=len(head) < SNIFF_BYTES)
            if guess is None or guess in ("utf-8", "ascii"):
                return head, "not UTF-8 (legacy Chinese text is often GB18030 or Big5): set input.encoding"
            return head, f"not UTF-8; charset-normalizer finds {guess}: set input.encoding: {guess}"
        if b"\x00" in head:  # UTF-16/32 without a byte-order mark has NULs (binary files too)
            wide = _wide_text(head)
            if wide:
                return (
                    head,
                    f"{wide} without a byte-order mark (charset-normalizer): set input.encoding: {wide}",
                )
        return head, ""
    if bom is None and b"\x00" in head and not codecs.lookup(codec).name.startswith(("utf-16", "utf-32")):
        wide = _wide_text(head)  # e.g. input.encoding: gb18030 for a corpus with UTF-16 files in it
        if wide:
            return head, f"{wide} without a byte-order mark, not {encoding}: set input.encoding: {wide}"
    text = head[bom[1] :] if bom else head
    return text.decode(codec, "ignore").encode("utf-8"), ""


SNIFF_BYTES = 8192  # what sniff() reads of a file by default


def _wide_text(head: bytes) -> str | None:
    """The UTF-16/32 codec a head without a byte-order mark is text in, per charset-normalizer
    and checked: it decodes in that codec and has no control characters but tab, newline and
    CR; else None."""
    guess = guess_encoding(head, whole=len(head) < SNIFF_BYTES)
    if guess is None or not guess.startswith(("utf-16", "utf-32")):
        return None
    text = head[: len(head) // 4 * 4].decode(guess, "replace").rstrip("\ufffd")
    return guess if not re.search("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffd]", text) else None


def _split_file(job: tuple[InputFile, str, Any]) -> list[InputSplit]:
    """One readable file's splits at its reader parameters' split_bytes (runs on a worker)."""
    f, reader_name, reader_params = job
    return registry.get(reader_name).plan(f.path, f.rel, reader_params)


def make_plan(
    files: list[InputFile],
    recipe: Recipe,
    report: ReadReport,
    scratch: Path | None = None,
    parallel_map: Callable[[Callable[[Any], Any], list[Any]], list[Any]] | None = None,
    hash_files: bool = False,
    skipped: list[dict[str, str]] | None = None,
) -> Plan:
    """Sniff each file and cut it into splits. Files without a task are noted (and reported).

    Files are planned independently, through ``parallel_map`` when given (e.g. the executor's
    workers: planning reads every uncompressed file to find line starts, which on hundreds of GB
    takes minutes on one core); with ``hash_files`` the same job records each file's sha256 in
    ``Plan.sha256``. Notes and counts are applied in file order, so the plan and report do not
    depend on the workers. A finer cut and the compressed files to cut into chunks (below) go
    one job per file through ``parallel_map`` as well.

    ``skipped``: the notes of :func:`expand_inputs` on entries that are not regular files, noted
    and reported first (under ``on_error: stop`` the first one stops the run).

    When the plan has fewer than ``input.min_tasks`` tasks, splits are cut finer (down to 1 MiB) so
    that every worker gets work; a compressed file cannot be cut, so, given ``scratch``, each
    compressed line file worth more than a quarter split is decompressed into line-aligned chunks
    there (deleted after the first pass). The plan depends only on the input, never on the worker
    count, so outputs stay identical for any number of workers.
    """
    params = registry.build_params(
        InputParams, {k: v for k, v in recipe.input.items() if k in InputParams.__dataclass_fields__}, "input"
    )
    jobs = []
    for f in files:
        reader = reader_for(f.path, params)
        rp = None
        if reader is not None:
            rp = dataclasses.replace(recipe.reader_params(reader), split_bytes=params.split_bytes)
        jobs.append((f, None if reader is None else reader.name, rp, hash_files))
    notes: list[dict[str, str]] = []
    for note in skipped or []:  # entries of the inputs that are not regular files
        notes.append(note)
        report.file_error(note["kind"], note["file"], note["message"])
    scans = (parallel_map or _map)(_scan_file, jobs)
    readable: list[tuple[InputFile, str, Any]] = []  # (file, reader name, reader parameters)
    tasks: list[InputSplit] = []
    for (f, reader_name, rp, _), scan in zip(jobs, scans, strict=True):
        if reader_name is None:
            notes.append(
                {"file": f.rel, "kind": "unsupported", "message": "no reader for this file type (skipped)"}
            )
            report.stats.count("files.unsupported")
        elif scan["note"] is not None:
            kind, message = scan["note"]
            notes.append({"file": f.rel, "kind": kind, "message": message})
            report.file_error(kind, f.rel, message)
        else:
            report.stats.count("files.read")
            readable.append((f, reader_name, rp))
            tasks += scan["splits"]
    sha256 = {f.rel: scan["sha256"] for f, scan in zip(files, scans, strict=True)} if hash_files else {}
    if len(tasks) < params.min_tasks:
        # a small corpus (or a few big files): cut finer so that every worker gets work
        finer = min(
            params.split_bytes, max(sum(t.nbytes for t in tasks) // params.min_tasks, MIN_SPLIT_BYTES)
        )
        if finer < params.split_bytes:
            jobs = [(f, name, dataclasses.replace(rp, split_bytes=finer)) for f, name, rp in readable]
            tasks = [split for splits in (parallel_map or _map)(_split_file, jobs) for split in splits]
        if scratch is not None:
            tasks = _chunk_compressed(tasks, recipe, finer, scratch, report, parallel_map or _map)
    if params.group_files:
        total = sum(t.nbytes for t in tasks)
        target = min(params.split_bytes, max(total // max(params.min_tasks, 1), MIN_SPLIT_BYTES))
        tasks = group_splits(tasks, target, by_source=bool(recipe.sources))
    return Plan(files, tasks, notes, sha256)


def group_splits(tasks: list[InputSplit], target: int, by_source: bool = False) -> list[InputSplit]:
    """Consecutive splits (in canonical order) merged into tasks of at most ``target`` on-disk
    bytes (a split as large alone stays alone); with ``by_source`` a task never spans two sources
    (the first component of ``rel``). One pass, linear in the splits. The documents read, in
    order, are the same as those of the splits one by one."""
    out: list[InputSplit] = []
    group: list[InputSplit] = []
    size = 0

    def flush() -> None:
        if len(group) == 1:
            out.append(group[0])
        elif group:
            head = group[0]
            more = [[s.path, s.rel, s.reader, s.start, s.end, s.first_line, s.nbytes] for s in group[1:]]
            out.append(dataclasses.replace(head, nbytes=size, more=more))

    for t in tasks:
        same = not by_source or not group or group[0].rel.split("/", 1)[0] == t.rel.split("/", 1)[0]
        if group and (size + t.nbytes > target or not same):
            flush()
            group, size = [], 0
        group.append(t)
        size += t.nbytes
    flush()
    return out


def _map(fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    return [fn(x) for x in items]


def _max_line_bytes(recipe: Recipe, task: InputSplit) -> int | None:
    """The reader's line limit for a task, when its parameters have one."""
    params = recipe.reader_params(registry.get(task.reader))
    limit = getattr(params, "max_line_bytes", None)
    return limit if isinstance(limit, int) else None


def _decompress_job(
    job: tuple[str, Path, int, int | None],
) -> tuple[list[tuple[Path, int, int]], tuple[int, str] | None]:
    """:func:`decompress_chunks` of one file (module level: runs on a worker)."""
    return decompress_chunks(*job)


def _chunk_compressed(
    tasks: list[InputSplit],
    recipe: Recipe,
    chunk_bytes: int,
    scratch: Path,
    report: ReadReport,
    parallel_map: Callable[[Callable[[Any], Any], list[Any]], list[Any]],
) -> list[InputSplit]:
    """Each compressed line file worth more than a quarter chunk decompressed into line-aligned
    chunks under ``scratch``, one file per job of ``parallel_map``; read errors are reported in
    task order."""

    def chunked(t: InputSplit) -> bool:
        reader = registry.get(t.reader)
        return (
            compression_of(t.path) is not None
            and _plain_lines(t.path, recipe.reader_params(registry.get(t.reader)))
            and t.nbytes > chunk_bytes // 4
            and reader.chunkable(recipe.reader_params(reader))
        )

    todo = [k for k, t in enumerate(tasks) if chunked(t)]
    jobs = [
        (tasks[k].path, scratch / f"{k:05d}", chunk_bytes, _max_line_bytes(recipe, tasks[k])) for k in todo
    ]
    done = dict(zip(todo, parallel_map(_decompress_job, jobs), strict=True))
    out: list[InputSplit] = []
    for k, t in enumerate(tasks):
        if k not in done:
            out.append(t)
            continue
        chunks, error = done[k]
        if error is not None:  # at the line the reader would name reading the file itself
            report.file_error("read_error", f"{t.rel}:{error[0]}", error[1])
        total = sum(n for _, _, n in chunks) or 1
        out += [
            InputSplit(str(p), t.rel, t.reader, 0, -1, first, t.nbytes * n // total) for p, first, n in chunks
        ]
    return out


def _plain_lines(path: str, params: Any) -> bool:
    """True when the file's bytes can be cut at any newline byte: UTF-8 (or a codec whose
    multi-byte characters never hold 0x0A, as GB18030 and Big5), not UTF-16/32."""
    bom = bom_encoding(sniff(path, 4))
    codec = codecs.lookup(bom[0] if bom else getattr(params, "encoding", "utf-8")).name
    return not codec.startswith(("utf-16", "utf-32"))
