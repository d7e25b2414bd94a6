"""The small gemm-like search space the catalogue's tests load, and how they read its errors."""

from __future__ import annotations

import textwrap

import pytest

from octune.catalogue.space import SearchSpace
from octune.core.errors import SpaceError

LIMITS = {
    "max_work_group_size": 256,
    "max_work_item_size_0": 256,
    "max_work_item_size_1": 256,
    "max_work_item_size_2": 64,
    "local_mem_size": 16384,
    "compute_units": 8,
}
SHAPE = ("M", "N", "K")

SMALL = textwrap.dedent(
    """\
    kernel: gemm
    problem: gemm
    entry: gemm_kernel
    description: a small gemm-like space
    parameters:
      MWG: {values: [8, 16, 32, 64], help: "tile in M"}
      NWG: {values: [8, 16, 32, 64]}
      KWG: {values: [8, 16, 32]}
      MDIMC: {values: [4, 8, 16]}
      NDIMC: {values: [4, 8, 16]}
      VW: {values: [1, 2, 4]}
      SA: {values: [false, true]}
      SB: {values: [0, 1]}
      PAD: {values: [0, 1]}
    derived:
      MWI: MWG // MDIMC
      NWI: NWG // NDIMC
      LOCAL_BYTES: 4 * KWG * (SA * MWG + SB * NWG)
      WORK: MWI * NWI
    constraints:
      - MWG % MDIMC == 0
      - NWG % NDIMC == 0
      - MWI % VW == 0
      - MDIMC * NDIMC <= max_work_group_size
      - LOCAL_BYTES <= local_mem_size
      - 2 <= WORK <= 32
      - SA == 1 or SB == 0
    launch:
      local: [NDIMC, MDIMC]
      global: ["ceil_div(N, NWG) * NDIMC", "ceil_div(M, MWG) * MDIMC"]
    """
)


def small_space() -> SearchSpace:
    return SearchSpace.from_yaml(SMALL, "small.yaml", SHAPE)


def error_of(text, origin="bad.yaml", shape_names=SHAPE) -> str:
    with pytest.raises(SpaceError) as caught:
        SearchSpace.from_yaml(text, origin, shape_names)
    message = str(caught.value)
    assert "\n" not in message, message
    assert origin in message, message
    return message


def with_changes(**sections) -> str:
    """SMALL with whole top-level sections replaced (given as YAML text)."""
    lines = SMALL.splitlines()
    out, skipping = [], False
    for line in lines:
        key = line.split(":", 1)[0] if line and not line.startswith(" ") else None
        if key is not None:
            skipping = key in sections
            if skipping:
                out.append(textwrap.dedent(sections[key]).rstrip())
                continue
        if not skipping:
            out.append(line)
    return "\n".join(out) + "\n"
