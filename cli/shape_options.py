"""A family's shape keys on the command line (``tune gemm --m 256 --transb``): parsed after
the kernel's name, since which keys a command takes depends on the kernel it names; checked
against each key's range in one line; listed by ``--help`` and completed by the shell once the
kernel is named (``ShapeCommand``).

Typer builds options from a function's signature, fixed when the command is declared; these
depend on an argument, so the command reads them from its extra arguments instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import typer
import typer.core
from typer.core import CompletionItem

from octune.core.errors import OctuneError

_KERNEL = "octune.kernel"  # where a parse keeps the kernel it found on the command line


@dataclass(frozen=True)
class ShapeKey:
    """``--name``: an integer in ``low..high``; a 0/1 key is a flag whose bare form means 1
    (``--transb`` or ``--transb 0``). No default: the key is required.
    """

    name: str
    low: int
    high: int
    help: str = ""
    default: int | None = None

    @property
    def flag(self) -> bool:
        return (self.low, self.high) == (0, 1)

    def describe(self) -> str:
        kind = "flag" if self.flag else f"integer {self.low}..{self.high}"
        default = "required" if self.default is None else f"default {self.default}"
        return f"{self.help} ({kind}, {default})" if self.help else f"{kind}, {default}"


def family_keys(name: str) -> tuple[str, list[ShapeKey]] | None:
    """The family that the kernel or family ``name`` computes, and its keys; None for a name no
    installed family knows (a bundle's own kernel).
    """
    from octune.catalogue.registry import available_kernels, families, load_kernel

    found = families().get(name)
    if found is None and name in available_kernels():
        found = load_kernel(name).family
    if found is None:
        return None
    return found.name, [ShapeKey(p.name, p.low, p.high, p.help, p.default) for p in found.params]


def parse_shape(owner: str, keys: Sequence[ShapeKey], args: list[str]) -> dict[str, int]:
    """``--key value``, ``--key=value`` or a bare ``--flag`` for each of ``keys``, each value
    in its key's range; one-line errors naming the key and what it takes.
    """
    known = {key.name: key for key in keys}
    usage = " ".join(f"--{name}" for name in known)
    shape: dict[str, int] = {}
    position = 0
    while position < len(args):
        arg = args[position]
        name, _, value = arg.removeprefix("--").partition("=")
        if not arg.startswith("--") or name not in known:
            raise OctuneError(f"unexpected '{arg}': {owner} takes {usage}")
        key = known[name]
        position += 1
        if not value:
            bare = position == len(args) or args[position].startswith("--")
            if bare and not key.flag:
                raise OctuneError(f"--{name} needs a value: {key.describe()}")
            value = "1" if bare else args[position]
            position += 0 if bare else 1
        if name in shape:
            raise OctuneError(f"--{name} is given twice: give it once")
        try:
            number = int(value)
        except ValueError:
            raise OctuneError(f"--{name} {value!r} is not an integer: {key.describe()}") from None
        if not key.low <= number <= key.high:
            raise OctuneError(f"--{name} {number} is out of range: {key.describe()}")
        shape[name] = number
    return shape


def shape_of(ctx: typer.Context, owner: str) -> dict[str, int]:
    """The shape after the kernel's name, read with the keys of ``owner``'s family."""
    found = family_keys(owner)
    return parse_shape(owner, found[1] if found else [], ctx.args)


class ShapeCommand(typer.core.TyperCommand):
    """A command whose ``kernel_argument`` names a kernel or family, its shape following as
    options: ``--help`` lists that family's keys, the shell completes them.
    """

    kernel_argument = "kernel_name"

    def _kernel(self, ctx: Any, args: list[str]) -> str | None:
        """The kernel argument's value: the positional argument in its place, skipping every
        option and the value an option takes.
        """
        params = self.get_params(ctx)
        takes_value = {
            opt
            for p in params
            if p.param_type_name == "option" and not getattr(p, "is_flag", False)
            for opt in p.opts
        }
        names = [p.name for p in params if p.param_type_name == "argument"]
        place = names.index(self.kernel_argument)
        positional, skip = [], False
        for arg in args:
            if skip:
                skip = False
            elif arg.startswith("-"):
                skip = arg in takes_value
            else:
                positional.append(arg)
        return positional[place] if len(positional) > place else None

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        ctx.meta[_KERNEL] = self._kernel(ctx, args)  # before --help, which reads it
        return super().parse_args(ctx, args)

    def format_epilog(self, ctx: Any, formatter: Any) -> None:
        """The named kernel's shape keys, else every family's (listing them loads the
        families, which `octune --help` must not wait for: only here, when help is shown).
        """
        from octune.catalogue.registry import families

        named = ctx.meta.get(_KERNEL)
        found = family_keys(named) if named else None
        if found is not None:
            rows = [(f"--{key.name}", key.describe()) for key in found[1]]
            with formatter.section(f"{found[0]} shape options"):
                formatter.write_dl(rows)
            return
        lines = ["Shape options, after the kernel or family name (`--help` after it lists them):"]
        for family in families().values():
            options = " ".join(
                f"[--{p.name}]" if p.default is not None else f"--{p.name}" for p in family.params
            )
            lines.append(f"{family.name}: {options}")
        formatter.write_paragraph()
        for line in lines:
            formatter.write_text(line)

    def shell_complete(self, ctx: Any, incomplete: str) -> list[CompletionItem]:
        found = super().shell_complete(ctx, incomplete)
        named = ctx.params.get(self.kernel_argument)
        keys = family_keys(named) if isinstance(named, str) and incomplete.startswith("-") else None
        if keys is not None:
            given = set(ctx.args)
            found += [
                CompletionItem(f"--{key.name}", help=key.describe())
                for key in keys[1]
                if f"--{key.name}".startswith(incomplete) and f"--{key.name}" not in given
            ]
        return found
