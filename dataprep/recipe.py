"""Recipes: a YAML file listing the stages in order, with their parameters.

    name: default
    seed: 0
    input:                 # options for the readers (see `dataprep stages`, kind reader)
      on_error: skip
    stages:
      - normalize: {}
      - exact_dedup: {}
      - tokenize: {vocab_size: 8000}
      - pack: {seq_length: 512}

Loading validates every stage name and parameter (unknown names, wrong types, missing artifacts)
and fills in defaults, once: the result, a :class:`Recipe`, is the run's typed spec (every stage
with its typed parameters, per source too; every reader with its typed parameters; one cache of
built readers). The driver hands that object to the planner, the executor and the workers; its
:meth:`Recipe.resolved` form is what gets saved into OUT and hashed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml

from dataprep.formats.registry import all_formats
from dataprep.stage import registry
from dataprep.stage.artifacts import ARTIFACTS, check_declarations
from dataprep.stage.params import RecipeError, build_params, param
from dataprep.stage.protocol import GlobalStage, Stage
from dataprep.stage.reader import Reader


@dataclass
class InputParams:
    """Options shared by every reader (each reader adds its own, e.g. text_field)."""

    format: Literal["auto", "jsonl", "txt", "parquet"] = param(
        "auto", help="reader for every input file; auto picks by file extension"
    )
    on_error: Literal["skip", "stop"] = param(
        "skip", help="bad records: skip (record the reason and continue) or stop the run"
    )
    invalid_utf8: Literal["replace", "drop"] = param(
        "replace",
        help="bytes invalid in the file's encoding (UTF-8 or input.encoding): replace with U+FFFD "
        "(counted) or drop the record",
    )
    max_line_bytes: int = param(
        16 << 20, help="records longer than this many bytes are dropped as line_too_long"
    )
    split_bytes: int = param(
        128 << 20, help="uncompressed line-oriented files larger than this are split into tasks"
    )
    batch_size: int = param(1000, help="documents per batch handed to each stage")
    min_tasks: int = param(
        64,
        help="when the input gives fewer tasks, splits are cut finer (down to 1 MiB) and compressed line "
        "files are decompressed into line-aligned chunks under OUT/work so every worker gets work (0: never)",
    )

    encoding: str = param(
        "utf-8",
        help="text encoding of the input files (a Python codec name, e.g. gb18030, big5); a file "
        "that starts with a UTF-8/16/32 byte-order mark is decoded by its mark whatever this says",
    )
    group_files: bool = param(
        True,
        help="consecutive small files (of one source) are read as one task of about the split size "
        "(split_bytes, or the finer cut for min_tasks); ids and outputs do not depend on it",
    )

    def validate(self) -> None:
        if self.max_line_bytes < 16:
            raise ValueError("max_line_bytes must be at least 16")
        if self.split_bytes < 1 << 16:
            raise ValueError("split_bytes must be at least 65536")
        if self.batch_size < 1:
            raise ValueError("batch_size must be positive")
        import codecs

        try:
            codecs.lookup(self.encoding)
        except LookupError:
            raise ValueError(
                f"encoding {self.encoding!r} is not a known codec (e.g. utf-8, gb18030, big5)"
            ) from None


@dataclass
class StageSpec:
    """One stage of a resolved recipe. label: unique name in stats (name, or name.N if repeated)."""

    label: str
    name: str
    params: Any

    def build(self) -> Stage:
        return registry.get(self.name)(self.params)


@dataclass
class SourceSpec:
    """One source of a mixed recipe (``sources:``): its input paths or globs, its target ``share``
    of the output's training tokens, the cap on repeating it (``max_epochs``) and its
    ``priority`` (a document duplicated between sources is kept in the source of highest
    priority; default: earlier in the list wins)."""

    name: str
    inputs: list[str]
    share: float
    max_epochs: float = 1.0
    priority: int = 0
    stages: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # map-stage overrides

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class MixParams:
    """How the shares are met (recipe ``mix:``)."""

    total_tokens: int = param(
        0,
        help="training tokens to write (0: as many as the shares allow without any source exceeding "
        "its max_epochs)",
    )
    policy: Literal["warn", "strict"] = param(
        "warn", help="a source short of its share: warn (write what it has) or strict (stop before writing)"
    )
    tolerance: float = param(0.005, help="largest |achieved - target| share counted as met")

    def validate(self) -> None:
        if self.total_tokens < 0:
            raise ValueError("total_tokens must be >= 0")
        if not 0.0 < self.tolerance < 1.0:
            raise ValueError("tolerance must be in (0, 1)")


@dataclass
class OutputParams:
    """What OUT holds besides the shards (recipe ``output:``)."""

    documents: bool = param(
        False,
        help="also write every document the shards hold, once (id, text, source, meta, tokens), as "
        "Parquet under OUT/documents; a recipe without a packing stage writes them always",
    )


@dataclass
class Recipe:
    """A resolved recipe: the run's typed spec. ``input``: every input option with its default
    filled in (what is saved); ``input_params``: the options shared by every reader, typed;
    ``readers``: each reader's typed parameters by reader name; ``by_source``: the stages as they
    run on each source with overrides (``sources[].stages``). Built once by :func:`parse_recipe`
    and passed on as it is (pickled to the workers); nothing downstream validates it again."""

    name: str
    seed: int
    input: dict[str, Any]
    stages: list[StageSpec]
    source: str = ""
    sources: list[SourceSpec] = dataclasses.field(default_factory=list)
    mix: MixParams | None = None
    output: OutputParams = dataclasses.field(default_factory=OutputParams)
    input_params: InputParams = dataclasses.field(default_factory=InputParams)
    readers: dict[str, Any] = dataclasses.field(default_factory=dict)
    by_source: dict[str, list[StageSpec]] = dataclasses.field(default_factory=dict)
    _built_readers: dict[str, Reader] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_built_readers": {}}  # readers are built where they read

    def resolved(self) -> dict[str, Any]:
        """The recipe with every default filled in (what is saved and hashed)."""
        out: dict[str, Any] = {
            "name": self.name,
            "seed": self.seed,
            "input": dict(sorted(self.input.items())),
        }
        if self.sources:
            out["sources"] = [s.to_json() for s in self.sources]
            out["mix"] = dataclasses.asdict(self.mix or MixParams())
        out["output"] = dataclasses.asdict(self.output)
        out["stages"] = [{s.name: dataclasses.asdict(s.params)} for s in self.stages]
        return out

    def stages_for(self, source: str) -> list[StageSpec]:
        """The stages as they run on the documents of ``source``: its overrides (``sources[].stages``,
        map stages only) merged into the recipe's parameters of every stage of that name."""
        return self.by_source.get(source, self.stages)

    def sources_by_priority(self) -> list[SourceSpec]:
        """The sources, highest priority first (ties: recipe order): the order of their files in
        the plan, so that deduplication, which keeps the first copy, keeps the copy of the source
        of highest priority."""
        order = sorted(range(len(self.sources)), key=lambda i: (-self.sources[i].priority, i))
        return [self.sources[i] for i in order]

    def hash(self) -> str:
        canonical = json.dumps(self.resolved(), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def reader(self, name: str) -> Reader:
        """The reader named ``name`` with the recipe's parameters, built once per process."""
        built = self._built_readers.get(name)
        if built is None:
            built = self._built_readers[name] = registry.get(name)(self.readers[name])
        return built


def builtin_recipes() -> list[str]:
    return sorted(
        p.name[:-5] for p in resources.files("dataprep.recipes").iterdir() if p.name.endswith(".yaml")
    )


def read_recipe_text(ref: str) -> tuple[str, str]:
    """(yaml text, where it came from) for a path or the name of a built-in recipe."""
    path = Path(ref)
    if path.is_file():
        return path.read_text(encoding="utf-8"), str(path)
    if ref in builtin_recipes():
        return resources.files("dataprep.recipes").joinpath(f"{ref}.yaml").read_text(
            encoding="utf-8"
        ), f"builtin:{ref}"
    names = ", ".join(builtin_recipes())
    raise RecipeError(f"recipe {ref!r} is neither a file nor a built-in recipe ({names})")


def _input_fields() -> set[str]:
    fields = {f.name for f in dataclasses.fields(InputParams)}
    for reader in registry.readers():
        fields |= {f.name for f in dataclasses.fields(reader.Params)}
    return fields


def parse_recipe(data: Any, where: str, seed: int | None = None) -> Recipe:
    if not isinstance(data, dict):
        raise RecipeError(f"{where}: a recipe is a mapping with 'stages' (and optionally name, seed, input)")
    unknown = sorted(set(data) - {"name", "seed", "input", "stages", "sources", "mix", "output"})
    if unknown:
        raise RecipeError(
            f"{where}: unknown top-level key(s) {', '.join(unknown)}; "
            "valid: name, seed, input, sources, mix, output, stages"
        )
    raw_output = data.get("output") or {}
    if not isinstance(raw_output, dict):
        raise RecipeError(f"{where}: 'output' must be a mapping (e.g. output: {{documents: true}})")
    output = build_params(OutputParams, raw_output, f"{where}: output")
    raw_input = data.get("input") or {}
    if not isinstance(raw_input, dict):
        raise RecipeError(f"{where}: 'input' must be a mapping")
    bad_input = sorted(set(raw_input) - _input_fields())
    if bad_input:
        raise RecipeError(
            f"{where}: unknown input option(s) {', '.join(bad_input)}; "
            f"valid: {', '.join(sorted(_input_fields()))}"
        )
    common = build_params(
        InputParams, {k: v for k, v in raw_input.items() if k in _field_names(InputParams)}, f"{where}: input"
    )
    resolved_input = dataclasses.asdict(common)
    readers: dict[str, Any] = {}
    for reader in registry.readers():
        params = build_params(
            reader.Params,
            {k: v for k, v in raw_input.items() if k in _field_names(reader.Params)},
            f"{where}: input",
        )
        readers[reader.name] = params
        resolved_input.update(dataclasses.asdict(params))
    raw_stages = data.get("stages")
    if not isinstance(raw_stages, list):
        raise RecipeError(f"{where}: 'stages' must be a list (empty: read and write documents only)")
    names = []
    for i, entry in enumerate(raw_stages):
        if isinstance(entry, str):
            names.append((entry, {}))
        elif isinstance(entry, dict) and len(entry) == 1:
            ((name, params),) = entry.items()
            if params is not None and not isinstance(params, dict):
                raise RecipeError(f"{where}: stages[{i}] ({name}): parameters must be a mapping")
            names.append((name, params or {}))
        else:
            raise RecipeError(
                f"{where}: stages[{i}] must be a stage name or a one-key mapping {{name: {{params}}}}"
            )
    sources = parse_sources(data.get("sources"), where)
    specs: list[StageSpec] = []
    seen: dict[str, int] = {}
    provided = {a.name for a in ARTIFACTS.values() if a.by_run and sources}  # the mix, by the run
    for i, (name, raw_params) in enumerate(names):
        try:
            cls = registry.get(name)
        except RecipeError:
            if name in {f.name for f in all_formats()}:
                raise RecipeError(
                    f"{where}: stages[{i}] {name!r} is a shard format, not a pipeline stage "
                    "(name it in pack.writers)"
                ) from None
            known = ", ".join(n for n, c in registry.all_stages().items() if c.kind in ("map", "global"))
            raise RecipeError(
                f"{where}: stages[{i}]: unknown stage {name!r}; known stages: {known}"
            ) from None
        if cls.kind not in ("map", "global"):
            raise RecipeError(f"{where}: stages[{i}] {name!r} is a {cls.kind}, not a pipeline stage")
        params = build_params(cls.Params, raw_params, f"{where}: stages[{i}] {name}")
        seen[name] = seen.get(name, 0) + 1
        label = name if seen[name] == 1 else f"{name}.{seen[name]}"
        wrong = check_declarations(cls, where)
        if wrong:
            raise RecipeError(wrong)
        for missing in [r for r in cls.requires if r not in provided]:
            providers = [n for n, c in registry.all_stages().items() if missing in getattr(c, "provides", ())]
            raise RecipeError(
                f"{where}: stage {name!r} needs {missing}, which no earlier stage provides"
                + (f" (put {' or '.join(providers)} before it)" if providers else "")
            )
        provided |= set(cls.provides)
        if issubclass(cls, GlobalStage) and cls.terminal and i != len(names) - 1:
            raise RecipeError(f"{where}: stage {name!r} consumes the documents and must come last")
        specs.append(StageSpec(label, name, params))
    recipe_seed = data.get("seed", 0)
    if isinstance(recipe_seed, bool) or not isinstance(recipe_seed, int):
        raise RecipeError(f"{where}: seed must be an integer")
    by_source: dict[str, list[StageSpec]] = {}
    for src in sources:  # overrides: of map stages the recipe has, with valid parameters
        for stage_name in src.stages:
            named = [s for s in specs if s.name == stage_name]
            if not named:
                raise RecipeError(f"{where}: source {src.name}: the recipe has no stage {stage_name!r}")
            cls = registry.get(stage_name)
            if cls.kind != "map":
                raise RecipeError(
                    f"{where}: source {src.name}: {stage_name} is a {cls.kind} stage; only map stages "
                    "(filters, cleaners) can be set per source"
                )
        if src.stages:  # every stage of an overridden name gets the override merged into its own
            by_source[src.name] = [
                StageSpec(
                    st.label,
                    st.name,
                    build_params(
                        registry.get(st.name).Params,
                        {**dataclasses.asdict(st.params), **src.stages[st.name]},
                        f"{where}: sources.{src.name}.stages.{st.name}",
                    ),
                )
                if src.stages.get(st.name)
                else st
                for st in specs
            ]
    if "mix" in data and not sources:
        raise RecipeError(f"{where}: 'mix' needs 'sources'")
    mix = build_params(MixParams, data.get("mix") or {}, f"{where}: mix") if sources else None
    packs = [s for s in specs if s.name == "pack"]
    if sources and packs:
        if getattr(packs[0].params, "packing", "concat") == "bestfit":
            raise RecipeError(
                f"{where}: a recipe with sources packs with concat or pad (bestfit could put two "
                "copies of a repeated document in one row)"
            )
        if getattr(packs[0].params, "tail", "pad") != "pad":
            raise RecipeError(f"{where}: a recipe with sources packs with pack.tail: pad")
    if sources and not packs:
        raise RecipeError(f"{where}: a recipe with sources needs a pack stage (the mix is applied there)")
    return Recipe(
        name=str(data.get("name", Path(where).stem)),
        seed=recipe_seed if seed is None else seed,
        input=resolved_input,
        stages=specs,
        source=where,
        sources=sources,
        mix=mix,
        output=output,
        input_params=common,
        readers=readers,
        by_source=by_source,
    )


def parse_sources(raw: Any, where: str) -> list[SourceSpec]:
    """``sources:`` validated: unique names, inputs given, shares positive and adding up to 1."""
    if raw is None:
        return []
    if not isinstance(raw, list) or not raw:
        raise RecipeError(f"{where}: 'sources' must be a non-empty list of {{name, inputs, share}}")
    out: list[SourceSpec] = []
    valid = {"name", "inputs", "share", "max_epochs", "priority", "stages"}
    for i, entry in enumerate(raw):
        at = f"{where}: sources[{i}]"
        if not isinstance(entry, dict):
            raise RecipeError(f"{at}: a source is a mapping {{name, inputs, share, max_epochs, priority}}")
        bad = sorted(set(entry) - valid)
        if bad:
            raise RecipeError(f"{at}: unknown key(s) {', '.join(bad)}; valid: {', '.join(sorted(valid))}")
        name = entry.get("name")
        if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
            raise RecipeError(
                f"{at}: 'name' must be a non-empty string without '/' that does not start with '.' "
                f"(got {name!r})"
            )
        inputs = entry.get("inputs")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not inputs or not all(isinstance(x, str) for x in inputs):
            raise RecipeError(f"{at} ({name}): 'inputs' must be a path or glob, or a list of them")
        share = entry.get("share")
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
            raise RecipeError(f"{at} ({name}): 'share' must be a number in (0, 1]")
        epochs = entry.get("max_epochs", 1.0)
        if isinstance(epochs, bool) or not isinstance(epochs, int | float) or epochs <= 0:
            raise RecipeError(f"{at} ({name}): 'max_epochs' must be a positive number")
        priority = entry.get("priority", -i)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise RecipeError(f"{at} ({name}): 'priority' must be an integer")
        overrides = entry.get("stages") or {}
        if not isinstance(overrides, dict) or not all(
            isinstance(k, str) and isinstance(v, dict) for k, v in overrides.items()
        ):
            raise RecipeError(f"{at} ({name}): 'stages' must map stage names to parameters")
        out.append(SourceSpec(name, list(inputs), float(share), float(epochs), priority, overrides))
    names = [s.name for s in out]
    if len(set(names)) != len(names):
        raise RecipeError(f"{where}: source names must be unique ({', '.join(names)})")
    total = sum(s.share for s in out)
    if abs(total - 1.0) > 1e-6:
        raise RecipeError(f"{where}: the sources' shares add up to {total:g}, not 1")
    return out


def _field_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def load_recipe(ref: str, seed: int | None = None) -> Recipe:
    """Load, validate and resolve a recipe from a path or a built-in name."""
    text, where = read_recipe_text(ref)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise RecipeError(f"{where}: not valid YAML: {e}") from None
    return parse_recipe(data, where, seed)
