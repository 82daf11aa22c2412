"""What a stage is made of, for the stages of ``stages/`` and of plug-ins (the ``dataprep.stages``
entry-point group): the protocol, the contexts, parameters and the registry, importable from here
in one line (``from dataprep.stage import MapStage, param, register``).

Modules: :mod:`~dataprep.stage.protocol` (the kinds of stage: map, scored filter, global),
:mod:`~dataprep.stage.context` (what a stage sees in a worker and in the driver),
:mod:`~dataprep.stage.reader` (readers, input splits, the bad-input report),
:mod:`~dataprep.stage.params` (``Params`` dataclasses and their checking),
:mod:`~dataprep.stage.artifacts` (what stages require and provide),
:mod:`~dataprep.stage.registry` (stages by name). A shard format's writer is not a stage: it
lives with the format registry (:class:`dataprep.formats.registry.ShardWriter`). The framework
imports these modules themselves.
"""

from __future__ import annotations

from dataprep.stage.context import DriverContext, StageContext
from dataprep.stage.params import NoParams, RecipeError, build_params, param, param_fields, type_name
from dataprep.stage.protocol import GlobalStage, MapStage, NothingLeft, ScoredFilter, Stage, StageResult
from dataprep.stage.reader import InputError, InputSplit, Reader, ReadReport
from dataprep.stage.registry import all_stages, get, readers, register
from dataprep.worker_env import IsolatedProcess

__all__ = [
    "DriverContext",
    "GlobalStage",
    "InputError",
    "InputSplit",
    "IsolatedProcess",
    "MapStage",
    "NoParams",
    "NothingLeft",
    "ReadReport",
    "Reader",
    "RecipeError",
    "ScoredFilter",
    "Stage",
    "StageContext",
    "StageResult",
    "all_stages",
    "build_params",
    "get",
    "param",
    "param_fields",
    "readers",
    "register",
    "type_name",
]
