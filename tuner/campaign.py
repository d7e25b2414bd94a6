"""Many workloads in one run: a YAML list of workloads and one budget shared among them.

The budget is shared by giving each workload an equal part of what is left when its turn
comes: a workload that stops early (patience, an exhausted space) leaves its unused part to
the ones after it, and no workload can starve the others.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from octune.tuner.errors import OctuneError
from octune.tuner.kernels import KernelSpec, load_kernel
from octune.tuner.session import Budget
from octune.tuner.workloads import GemmWorkload

EXAMPLE = "workloads: [{kernel: gemm, m: 1024, n: 1024, k: 1024, transb: true}]"


class _WorkloadEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    kernel: str = "gemm"
    m: int
    n: int
    k: int
    transa: bool = False
    transb: bool = False
    dtype: Literal["float32"] = "float32"


class _WorkloadFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    workloads: list[_WorkloadEntry] = Field(min_length=1)


@dataclass(frozen=True)
class Task:
    kernel: KernelSpec
    workload: GemmWorkload


def load_tasks(path: Path) -> list[Task]:
    """The workloads of a file, validated whole before anything is measured."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        parsed = _WorkloadFile.model_validate(data)
    except OSError as error:
        raise OctuneError(f"cannot read workloads file {path}: {error.strerror}") from error
    except UnicodeDecodeError as error:
        raise OctuneError(
            f"{path}: byte {error.start} is not UTF-8 text; save the file as UTF-8"
        ) from error
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise OctuneError(f"{path}: not valid YAML{where}; write it like: {EXAMPLE}") from error
    except ValidationError as error:
        first = error.errors()[0]
        place = ".".join(str(part) for part in first["loc"]) or "the file"
        raise OctuneError(
            f"{path}: {place}: {first['msg'].lower()} ({error.error_count()} problem(s)); "
            f"write it like: {EXAMPLE}"
        ) from error
    tasks = []
    for entry in parsed.workloads:
        workload = GemmWorkload(entry.m, entry.n, entry.k, entry.transa, entry.transb)
        tasks.append(Task(load_kernel(entry.kernel), workload))
    keys = [(task.kernel.name, task.workload.key) for task in tasks]
    if len(set(keys)) != len(keys):
        raise OctuneError(f"{path}: a workload is listed twice: list each one once")
    return tasks


def share(
    total: Budget, remaining_tasks: int, used_candidates: int, used_seconds: float
) -> Budget | None:
    """The part of the total budget the next workload gets; None when nothing is left."""
    candidates = seconds = None
    if total.candidates is not None:
        candidates = (total.candidates - used_candidates) // remaining_tasks
        if candidates < 1:
            return None
    if total.seconds is not None:
        seconds = (total.seconds - used_seconds) / remaining_tasks
        if seconds <= 0:
            return None
    return replace(total, candidates=candidates, seconds=seconds)
