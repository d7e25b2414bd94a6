"""The element types octune tunes, as every layer names them (numpy's names): what a workload,
a kernel's space, a lookup query, a bundle and the C header key their answers by. Standard
library only, like the lookup that bundles carry. ``docs/precision.md`` says what each one
means for storage, arithmetic and verification.
"""

from __future__ import annotations

#: float32 first: the default of every command, query and stored row.
DTYPES: tuple[str, ...] = ("float32", "float16", "int8")


def check_dtype(dtype: str) -> str:
    """``dtype`` if octune knows it, else a one-line ValueError naming the choices."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    return dtype


#: The dtypes a whole network runs in (``octune run --dtype``), by the numpy type its tensors
#: and weights are stored as; int8 is a layer's dtype, set by a quantized model's nodes.
STORAGE: dict[str, str] = {"float32": "float32", "float16": "float16"}
