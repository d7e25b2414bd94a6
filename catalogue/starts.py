"""Configs a search measures first on a device of a type where nothing stored says more: each
kernel's ``search_spaces/starts/<kernel>.yaml``, a list per device type, chosen from
measurements of other devices of the type (``benchmarks/space_starts.py``). CLBlast ships
per-vendor defaults for the same reason: a fresh device's first seconds find a tile that runs
well on its kind instead of drawing random ones.

They live beside the spaces, not in them: a space's text is part of its kernel version, and
changing where a search starts changes no result, so it must not orphan what was tuned.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from importlib import resources
from typing import Annotated

import yaml
from pydantic import BeforeValidator, RootModel, ValidationError

from octune.catalogue.registry import KernelSpec
from octune.catalogue.safe_yaml import YamlLimitError, safe_load
from octune.catalogue.space_schema import DeviceType
from octune.core.errors import SpaceError, validation_message

log = logging.getLogger(__name__)
HINT = "write 'gpu: [{NAME: value, ...}, ...]'"


def _integer(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"must be an integer, not {value!r}")
    return value


class StartsModel(
    RootModel[dict[DeviceType, list[dict[str, Annotated[int, BeforeValidator(_integer)]]]]]
):
    """``gpu: [{MWG: 64, ...}, ...]``: the configs, best first, per device type."""


def parse_starts(text: str, space_parameters: Mapping[str, tuple[int, ...]], origin: str
                 ) -> dict[str, list[dict[str, int]]]:  # fmt: skip
    """Each device type's starts as whole configs (a parameter a start leaves out at its first
    value); a start naming no parameter of the space, or a value the parameter lacks, is an
    error that says which.
    """
    try:
        model = StartsModel.model_validate(safe_load(text) or {})
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(map(str, item['loc']))}: {validation_message(item)}"
            for item in error.errors()[:3]
        )
        raise SpaceError(f"{origin}: {problems}; {HINT}") from None
    except (YamlLimitError, yaml.YAMLError) as error:
        problem = " ".join(str(error).split())
        raise SpaceError(f"{origin}: {problem}; {HINT}") from None
    starts: dict[str, list[dict[str, int]]] = {}
    for kind, configs in model.root.items():
        for index, config in enumerate(configs):
            for name, value in config.items():
                if name not in space_parameters:
                    raise SpaceError(
                        f"{origin}: {kind}[{index}] names '{name}', which is no parameter of the "
                        f"space; use some of {', '.join(space_parameters)}"
                    )
                if value not in space_parameters[name]:
                    listed = ", ".join(map(str, space_parameters[name]))
                    raise SpaceError(
                        f"{origin}: {kind}[{index}]: {name} = {value} is none of its values "
                        f"({listed})"
                    )
        starts[kind] = [
            {name: config.get(name, values[0]) for name, values in space_parameters.items()}
            for config in configs
        ]
    return starts


def config_starts(kernel: KernelSpec, device_type: str) -> list[dict[str, int]]:
    """The kernel's starts on a device of ``device_type``, best first; none where its package
    ships none (a user's kernel, a type nothing was measured on), or where the kernel's space
    is another than the one they were written for (a farm job's older version whose
    parameters differ): where a search starts is a hint, never a reason to stop it.
    """
    parameters = tuple((p.name, tuple(p.values)) for p in kernel.space.parameters)
    return [dict(config) for config in _shipped(kernel.name, parameters).get(device_type, [])]


@functools.cache
def _shipped(
    name: str, parameters: tuple[tuple[str, tuple[int, ...]], ...]
) -> dict[str, list[dict[str, int]]]:
    """A kernel's shipped starts, read once a process for each space they meet (a network's
    run opens a session for each of its layers' kernels): copied out, never handed out.
    """
    path = resources.files("octune.search_spaces").joinpath("starts", f"{name}.yaml")
    if not path.is_file():
        return {}
    try:
        return parse_starts(path.read_text(), dict(parameters), f"search_spaces/starts/{path.name}")
    except SpaceError as error:
        log.warning("no starts for %s: %s", name, error)
        return {}
