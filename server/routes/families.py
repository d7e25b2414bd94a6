"""The families a lookup may name and the shape keys each takes: what a runtime's author
reads before writing the first ``GET /v1/lookup``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter

from octune.api.schemas import FamilyOut, ShapeKeyOut
from octune.catalogue.family import Family
from octune.catalogue.registry import families, kernels_of

router = APIRouter(tags=["lookup"])


def family_out(family: Family) -> FamilyOut:
    keys = [
        ShapeKeyOut(name=p.name, help=p.help, minimum=p.low, maximum=p.high, default=p.default)
        for p in family.params
    ]
    query = urlencode({"device": "DEVICE", "kernel": family.name, **family.example_shape()})
    return FamilyOut(
        name=family.name,
        dtypes=list(family.dtypes),
        kernels=kernels_of(family.name),
        shape=keys,
        flops=family.flops,
        example=f"/v1/lookup?{query}",
    )


@router.get("/families")
def list_families() -> list[FamilyOut]:
    """Every family, its dtypes, kernels and shape keys (with ranges and defaults)."""
    return [family_out(f) for f in families().values()]


def shape_parameters(found: Mapping[str, Family]) -> list[dict[str, Any]]:
    """OpenAPI query parameters for the shape keys of every family (``GET /v1/lookup``), so
    that a generated client or Swagger UI's "Try it out" can send a shape. A key several
    families share (``n``) is declared once, its description saying what it is in each.
    """
    merged: dict[str, dict[str, Any]] = {}
    for family in found.values():
        for p in family.params:
            entry = merged.setdefault(p.name, {"low": p.low, "high": p.high, "says": []})
            entry["low"], entry["high"] = min(entry["low"], p.low), max(entry["high"], p.high)
            default = "" if p.default is None else f", default {p.default}"
            entry["says"].append(f"{family.name}: {p.help}{default}")
    return [
        {
            "name": name,
            "in": "query",
            "required": False,
            "schema": {"type": "integer", "minimum": entry["low"], "maximum": entry["high"]},
            "description": "; ".join(entry["says"]),
        }
        for name, entry in merged.items()
    ]
