"""A stage's parameters: a ``Params`` dataclass whose fields (:func:`param`: default and help
text) are what a recipe may set, checked by :func:`build_params` (unknown keys, types, required
fields, the dataclass's own ``validate``) and listed by ``dataprep stages``."""

from __future__ import annotations

import contextlib
import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal


class RecipeError(ValueError):
    """The recipe (or a stage's parameters) is invalid; the message says what to change."""


@dataclass
class NoParams:
    """A stage without parameters."""


def param_fields(params_cls: type) -> list[tuple[str, Any, Any, str]]:
    """[(name, type, default, help)] of a Params dataclass; default is MISSING when required."""
    hints = typing.get_type_hints(params_cls)
    out = []
    for f in dataclasses.fields(params_cls):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        out.append((f.name, hints[f.name], default, f.metadata.get("help", "")))
    return out


def type_name(tp: Any) -> str:
    if typing.get_origin(tp) is Literal:
        return "|".join(str(a) for a in typing.get_args(tp))
    return str(tp).replace("typing.", "") if not isinstance(tp, type) else tp.__name__


def _check_value(where: str, tp: Any, value: Any) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin is Literal:
        if value not in args:
            raise RecipeError(f"{where}: {value!r} is not one of {', '.join(map(repr, args))}")
        return value
    if origin in (typing.Union, types.UnionType):
        for a in args:
            if a is type(None):
                if value is None:
                    return None
                continue
            with contextlib.suppress(RecipeError):
                return _check_value(where, a, value)
        raise RecipeError(f"{where}: {value!r} does not match {type_name(tp)}")
    if origin is list:
        if not isinstance(value, list):
            raise RecipeError(f"{where}: expected a list, got {value!r}")
        return [_check_value(f"{where}[{i}]", args[0] if args else Any, v) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise RecipeError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise RecipeError(f"{where}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise RecipeError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise RecipeError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise RecipeError(f"{where}: expected a string, got {value!r}")
        return value
    return value


def build_params(params_cls: type, raw: dict[str, Any] | None, where: str) -> Any:
    """Validate ``raw`` against a Params dataclass (unknown keys, types, required fields)."""
    raw = dict(raw or {})
    fields = {name: (tp, default) for name, tp, default, _ in param_fields(params_cls)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        valid = ", ".join(sorted(fields)) or "(none)"
        raise RecipeError(f"{where}: unknown parameter(s) {', '.join(unknown)}; valid: {valid}")
    values = {}
    for name, (tp, default) in fields.items():
        if name in raw:
            values[name] = _check_value(f"{where}.{name}", tp, raw[name])
        elif default is dataclasses.MISSING:
            raise RecipeError(f"{where}: missing required parameter {name!r}")
    try:
        params = params_cls(**values)
    except (TypeError, ValueError) as e:
        raise RecipeError(f"{where}: {e}") from None
    validate = getattr(params, "validate", None)
    if validate is not None:
        try:
            validate()
        except ValueError as e:
            raise RecipeError(f"{where}: {e}") from None
    return params


def param(default: Any = dataclasses.MISSING, help: str = "", **kw: Any) -> Any:
    """A dataclass field with a help string, shown by ``dataprep stages``."""
    if isinstance(default, list | dict):
        return field(default_factory=lambda d=default: type(d)(d), metadata={"help": help}, **kw)
    return field(default=default, metadata={"help": help}, **kw)
