"""The stage registry: stages by name.

Each stage is one class in one file of the ``stages`` package, registered by name with
:func:`register`. The framework never imports a concrete stage: the registry discovers them by
walking the ``stages`` package (and the ``dataprep.stages`` entry-point group, for plug-ins) the
first time a name is looked up.
"""

from __future__ import annotations

import importlib
import pkgutil
from importlib.metadata import entry_points

from dataprep.stage.params import RecipeError
from dataprep.stage.reader import Reader

_REGISTRY: dict[str, type] = {}
_DISCOVERED = False


def register(cls: type) -> type:
    """Class decorator: make a stage (or reader) available to recipes by its name."""
    name = getattr(cls, "name", "")
    if not name:
        raise TypeError(f"{cls.__qualname__} has no 'name'")
    existing = _REGISTRY.get(name)
    if existing is not None and existing is not cls and existing.__qualname__ != cls.__qualname__:
        raise TypeError(
            f"stage name {name!r} is registered twice ({existing.__module__} and {cls.__module__})"
        )
    _REGISTRY[name] = cls
    return cls


def _discover() -> None:
    global _DISCOVERED
    if _DISCOVERED:
        return
    _DISCOVERED = True
    package = importlib.import_module("stages")
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"stages.{info.name}")
    for ep in entry_points(group="dataprep.stages"):
        ep.load()


def get(name: str) -> type:
    """The registered class for ``name``; RecipeError listing the known names if absent."""
    _discover()
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise RecipeError(f"unknown stage {name!r}; known stages: {known}") from None


def all_stages() -> dict[str, type]:
    """Every registered class by name, sorted."""
    _discover()
    return dict(sorted(_REGISTRY.items()))


def readers() -> list[type[Reader]]:
    """The registered readers, by name."""
    return [c for c in all_stages().values() if getattr(c, "kind", "") == "reader"]
