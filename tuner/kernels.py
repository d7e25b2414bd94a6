"""Kernel families: an OpenCL C template in kernels/ plus its search space in search_spaces/.

Adding a kernel means adding those two files; the pair's SHA-256 names the kernel version,
because a config is only valid for the exact source it was tuned with.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources

from octune.lookup.semantics import kernel_version_sha256
from octune.tuner.errors import OctuneError
from octune.tuner.space import SearchSpace
from octune.tuner.workloads import GemmWorkload, Workload

PROBLEMS: dict[str, type[GemmWorkload]] = {GemmWorkload.problem: GemmWorkload}


@dataclass(frozen=True)
class KernelSpec:
    name: str
    source: str
    space: SearchSpace

    @property
    def sha256(self) -> str:
        return kernel_version_sha256(self.source, self.space.source_text)

    def __reduce__(self) -> tuple[object, tuple[str, str, str]]:
        return kernel_from_texts, (self.name, self.source, self.space.source_text)

    def defines(self, config: Mapping[str, int], workload: Workload) -> dict[str, int]:
        """Everything the template is compiled with: the workload's defines, then the config's."""
        return {**workload.defines(), **self.space.defines(config)}

    def build_options(self, config: Mapping[str, int], workload: Workload) -> list[str]:
        """The defines, plus -w: compilers' remarks (e.g. PoCL's "loop not unrolled") would
        otherwise land on the user's terminal once per candidate; errors still fail the build.
        """
        defines = [
            f"-D{name}={int(value)}" for name, value in self.defines(config, workload).items()
        ]
        return [*defines, "-w"]


def available_kernels() -> list[str]:
    spaces = resources.files("octune.search_spaces")
    return sorted(
        p.name.removesuffix(".yaml") for p in spaces.iterdir() if p.name.endswith(".yaml")
    )


@cache
def load_kernel(name: str) -> KernelSpec:
    known = available_kernels()
    if name not in known:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise OctuneError(f"unknown kernel '{name}': {hint}available kernels: {', '.join(known)}")
    space_text = resources.files("octune.search_spaces").joinpath(f"{name}.yaml").read_text()
    space = _space(name, space_text)
    template = resources.files("octune.kernels").joinpath(f"{space.kernel}.cl")
    if not template.is_file():
        raise OctuneError(
            f"{name}.yaml names template kernels/{space.kernel}.cl, which does not exist"
        )
    return KernelSpec(name=name, source=template.read_text(), space=space)


def kernel_from_texts(name: str, source: str, space_text: str) -> KernelSpec:
    """A kernel from its template and space texts: how worker processes rebuild a KernelSpec
    (compiled expressions do not pickle), and how tests load fixture kernels.
    """
    return KernelSpec(name=name, source=source, space=_space(name, space_text))


def _space(name: str, space_text: str) -> SearchSpace:
    shape_names = {shape_name for cls in PROBLEMS.values() for shape_name in cls.shape_names}
    space = SearchSpace.from_yaml(space_text, f"{name}.yaml", shape_names=shape_names)
    if space.problem not in PROBLEMS:
        raise OctuneError(
            f"{name}.yaml names problem '{space.problem}', which octune does not know: "
            f"use one of {', '.join(PROBLEMS)}"
        )
    return space
