"""A search space's YAML as written: parsed with limits and no duplicate keys, validated
against the schema (pydantic), every problem reported in one line that says where and what
keys are allowed. ``space.py`` builds the space from the validated model.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from octune.catalogue.safe_yaml import YamlLimitError, check_limits
from octune.core.errors import SpaceError, validation_message
from octune.core.expressions import INT64_MAX, INT64_MIN
from octune.core.precision import check_dtype

DeviceType = Literal["cpu", "gpu", "accelerator"]  # a space's `devices:`, a starts file's keys
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FILE_STEM = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")
_SHA256 = re.compile(r"[0-9a-f]{64}")
QUOTE_HINT = (
    " (YAML splits [a, b] lists at commas: quote expressions that contain one, "
    'e.g. ["ceil_div(N, NWG)"])'
)


def _int_value(value: object) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise ValueError(f"{value} does not fit in 64 bits")
        return value
    raise ValueError(f"must be an integer (or true/false), not {value!r}")


def _expression_text(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"must be an expression (a string or a number), not {value!r}")
    return str(value)


def _none_to(empty: Any) -> BeforeValidator:
    """Let a key with nothing under it (e.g. all constraints commented out) mean 'none'."""
    return BeforeValidator(lambda value: empty() if value is None else value)


def _file_stem(value: object) -> object:
    if isinstance(value, str) and not _FILE_STEM.fullmatch(value):
        raise ValueError(f"'{value}' must be a bare name like 'gemm' (letters, digits, _ and -)")
    return value


def _identifier(value: object) -> object:
    if isinstance(value, str) and not IDENTIFIER.fullmatch(value):
        raise ValueError(f"'{value}' must be a C identifier like 'gemm'")
    return value


def _sha256(value: object) -> object:
    if isinstance(value, str) and not _SHA256.fullmatch(value):
        raise ValueError(f"'{value}' must be a kernel version's sha256 (64 lowercase hex digits)")
    return value


def _reason(value: object) -> object:
    if isinstance(value, str) and not value.strip():
        raise ValueError("say why the version is retired (what it computed wrong)")
    return value


def _dtype(value: object) -> object:
    return check_dtype(value) if isinstance(value, str) else value


_IntValue = Annotated[int, BeforeValidator(_int_value)]
_ExpressionText = Annotated[str, BeforeValidator(_expression_text)]
_Sha256 = Annotated[str, BeforeValidator(_sha256)]
_Reason = Annotated[str, BeforeValidator(_reason)]


class ParameterModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    values: list[_IntValue]
    help: Annotated[str, _none_to(str)] = ""


class LaunchModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    local: list[_ExpressionText]
    global_: list[_ExpressionText] = Field(alias="global")


class FollowUpModel(LaunchModel):
    entry: Annotated[str, BeforeValidator(_identifier)]


class SpaceModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kernel: Annotated[str, BeforeValidator(_file_stem)]
    problem: Annotated[str, BeforeValidator(_file_stem)]
    entry: Annotated[str, BeforeValidator(_identifier)]
    description: Annotated[str, _none_to(str)] = ""
    devices: list[DeviceType] | None = Field(default=None, min_length=1)
    parameters: dict[str, ParameterModel]
    dtype: Annotated[str, BeforeValidator(_dtype)] = "float32"
    derived: Annotated[dict[str, _ExpressionText], _none_to(dict)] = Field(default_factory=dict)
    constraints: Annotated[list[_ExpressionText], _none_to(list)] = Field(default_factory=list)
    requires: Annotated[list[_ExpressionText], _none_to(list)] = Field(default_factory=list)
    launch: LaunchModel
    workspace: _ExpressionText | None = None
    zeroed: _ExpressionText | None = None
    then: Annotated[list[FollowUpModel], _none_to(list)] = Field(default_factory=list)
    retired: Annotated[dict[_Sha256, _Reason], _none_to(dict)] = Field(default_factory=dict)
    extends: Annotated[str, BeforeValidator(_file_stem)] | None = None


def _keys(model: type[BaseModel]) -> list[str]:
    return [field.alias or name for name, field in model.model_fields.items()]


def _allowed_keys(location: tuple[int | str, ...]) -> list[str]:
    if not location:
        return _keys(SpaceModel)
    if location == ("launch",):
        return _keys(LaunchModel)
    if location[0] == "then" and len(location) == 2:
        return _keys(FollowUpModel)
    if location[0] == "parameters" and len(location) == 2:
        return _keys(ParameterModel)
    return []


def condense(error: ValidationError) -> str:
    """Pydantic's multi-line report as one line: path and message of each problem."""
    parts = []
    for item in error.errors():
        location = tuple(item["loc"])
        path = ".".join(str(part) for part in location)
        parent = ".".join(str(part) for part in location[:-1])
        where = f" in {parent}" if parent else ""
        if item["type"] == "extra_forbidden":
            allowed = ", ".join(_allowed_keys(location[:-1]))
            parts.append(f"unknown key '{location[-1]}'{where} (allowed: {allowed})")
        elif item["type"] == "missing":
            parts.append(f"missing key '{location[-1]}'{where}")
        else:
            message = validation_message(item)
            if location[:1] == ("parameters",) and len(location) == 2:
                message += " (write NAME: {values: [...], help: ...})"
            parts.append(f"{path or 'top level'}: {message}")
    shown = "; ".join(parts[:3])
    if len(parts) > 3:
        shown += f"; and {len(parts) - 3} more"
    return " ".join(shown.split())


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys; a duplicated parameter must be an error."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[object] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:  # an unhashable key: construct_mapping reports it
            continue
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key '{key}'", key_node.start_mark
            )
    return loader.construct_mapping(node, deep=True)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,  # type: ignore[arg-type]
)


def load_yaml(text: str, origin: str) -> Any:
    try:
        check_limits(text)
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except YamlLimitError as error:
        raise SpaceError(f"search space {origin}: {error}; write the space out plainly") from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = " ".join(str(error.problem or error.context or "invalid YAML").split())
        raise SpaceError(f"search space {origin}: YAML error{where}: {problem}") from None
    except yaml.YAMLError as error:
        problem = " ".join(str(error).split())
        raise SpaceError(f"search space {origin}: YAML error: {problem}") from None
