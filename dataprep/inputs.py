"""From command-line inputs (files, directories, globs) or a recipe's ``sources:`` to the sorted
list of input files.

Directories are walked recursively (hidden entries skipped, symbolic links followed, each
directory once); entries that are not regular files (dangling links, link loops, FIFOs, sockets,
devices) are noted, never read. Files are ordered by their path relative to the input root, so
task order, document ids and therefore outputs do not depend on the file system's listing order
or on the worker count.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import glob
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from dataprep.recipe import Recipe


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


def _walk(root: Path) -> Iterator[tuple[str, str, os.stat_result | None, tuple[str, str] | None]]:
    """Every entry under directory ``root`` that is not a directory, as (its real absolute path,
    its path relative to ``root`` in POSIX form, :func:`_classify`'s answer); hidden entries
    skipped; directories (symbolic links to them included) entered once each, by (device, inode),
    so a link to an ancestor ends there instead of looping. Entries come from ``os.scandir``: a
    regular file costs one ``lstat`` and its real path is its directory's (resolved once per
    directory) joined with its name; only symbolic links are resolved one by one."""
    seen: set[tuple[int, int]] = set()
    stack: list[tuple[str, str]] = [(str(root), "")]  # (path, rel prefix: "" or "a/b/")
    while stack:
        d, prefix = stack.pop()
        try:
            st = os.stat(d)
            with os.scandir(d) as it:
                entries = sorted((e for e in it if not e.name.startswith(".")), key=lambda e: e.name)
            real_dir = os.path.realpath(d).rstrip("/") + "/"  # an entry's real path: this + its name
        except OSError as e:
            yield (
                os.path.abspath(d),
                prefix.rstrip("/") or ".",
                None,
                (
                    "read_error",
                    f"cannot list directory: {e.strerror or e}",
                ),
            )
            continue
        if (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        subdirs = []
        for e in entries:
            rel = prefix + e.name
            info: os.stat_result | None
            note: tuple[str, str] | None
            try:
                plain_file = e.is_file(follow_symlinks=False)
                plain_dir = not plain_file and e.is_dir(follow_symlinks=False)
            except OSError:
                plain_file = plain_dir = False
            if plain_dir:
                subdirs.append((e.path, rel + "/"))
                continue
            if plain_file:
                try:
                    info, note = e.stat(follow_symlinks=False), None
                except OSError as err:
                    info, note = None, ("read_error", f"cannot examine: {err.strerror or err}")
                yield real_dir + e.name, rel, info, note
                continue
            info, note = _classify(Path(e.path))  # a symbolic link, FIFO, socket or device
            if info is not None and stat.S_ISDIR(info.st_mode):
                subdirs.append((e.path, rel + "/"))
                continue
            real = os.path.realpath(e.path) if info is not None else os.path.abspath(e.path)
            yield real, rel, info, note
        stack += reversed(subdirs)


def _entry(
    path: Path, root: Path, info: os.stat_result | None, note: tuple[str, str] | None
) -> tuple[str, str, os.stat_result | None, tuple[str, str] | None]:
    """(real absolute path, path relative to ``root``, info, note) of one named entry."""
    real = str(path.resolve()) if info is not None else str(path.absolute())  # a loop cannot resolve
    return real, path.relative_to(root).as_posix(), info, note


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
    file), for :func:`dataprep.planning.make_plan` to report under the input's error policy.
    """
    found: dict[str, InputFile] = {}
    notes: dict[str, dict[str, str]] = {}
    excluded = str(exclude.resolve()) if exclude is not None else None
    for arg in args:
        entries: Iterable[tuple[str, str, os.stat_result | None, tuple[str, str] | None]]
        if _has_magic(arg):
            prefix = Path(arg.split("*")[0].split("?")[0].split("[")[0])
            root = prefix if arg.endswith(os.sep) or prefix.is_dir() else prefix.parent
            listed = []
            for g in sorted(glob.glob(arg, recursive=True)):
                info, note = _classify(Path(g))
                if info is not None and stat.S_ISDIR(info.st_mode):
                    continue
                listed.append(_entry(Path(g), root, info, note))
            if not listed:
                raise InputNotFound(f"input {arg!r} matches no file")
            entries = listed
        else:
            p = Path(arg)
            info, note = _classify(p)
            if info is not None and stat.S_ISDIR(info.st_mode):
                entries = _walk(p)
            elif info is not None or (note is not None and os.path.lexists(p)):
                entries = [_entry(p, p.parent, info, note)]
            else:
                raise InputNotFound(f"input {arg!r} does not exist")
        head = f"{Path(arg.rstrip('/')).name or arg}/" if len(args) > 1 else ""
        for real, rel, info, note in entries:
            if excluded is not None and (real == excluded or real.startswith(excluded + os.sep)):
                continue
            rel = head + rel
            if info is None:
                assert note is not None
                notes.setdefault(rel, {"file": rel, "kind": note[0], "message": note[1]})
                continue
            if real not in found:
                found[real] = InputFile(real, rel, info.st_size, info.st_mtime_ns)
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
