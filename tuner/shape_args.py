"""Shape options on the command line (``--m 256 --transb``): one parser for every family, so
``tune``, ``best`` and the offline ``lookup`` read a shape the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from octune.core.errors import OctuneError


@dataclass(frozen=True)
class ShapeOption:
    name: str
    flag: bool  # 0/1: a bare ``--name`` means 1
    help: str = ""


def parse_shape_args(owner: str, options: Sequence[ShapeOption], args: list[str]) -> dict[str, int]:
    """``--key value``, ``--key=value`` or a bare ``--flag`` for each of ``options``."""
    known = {option.name: option for option in options}
    usage = " ".join(f"--{name}" for name in known)
    shape: dict[str, int] = {}
    position = 0
    while position < len(args):
        arg = args[position]
        name, _, value = arg.removeprefix("--").partition("=")
        if not arg.startswith("--") or name not in known:
            raise OctuneError(f"unexpected '{arg}': {owner} takes {usage}")
        option = known[name]
        position += 1
        if not value:
            bare = position == len(args) or args[position].startswith("--")
            if bare and not option.flag:
                raise OctuneError(f"--{name} needs a value ({option.help or 'an integer'})")
            value = "1" if bare else args[position]
            position += 0 if bare else 1
        if name in shape:
            raise OctuneError(f"--{name} is given twice: give it once")
        try:
            shape[name] = int(value)
        except ValueError:
            raise OctuneError(f"--{name} {value!r} is not an integer") from None
    return shape
