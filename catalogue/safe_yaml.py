"""YAML that cannot make a reader do unbounded work: nesting depth and the size of the document
with every alias expanded are counted from PyYAML's event stream, before any node is built.

A space, a workloads file or a bundle can come from someone else (an upload, an import). A
5 KB document of nested aliases (``&a [1, 1, ...]``, ``&b [*a, *a, ...]``, ...) expands to
billions of values wherever it is walked or printed, and 5,000 nested brackets exhaust the
recursion of PyYAML's composer; both are refused here with the line where the limit was met.
"""

from __future__ import annotations

from typing import Any

import yaml

#: Collections nested in one another: a search space needs 4.
MAX_DEPTH = 32
#: Values (scalars, collections and the expansions of aliases): octune's largest space has
#: about 300.
MAX_VALUES = 100_000


class YamlLimitError(ValueError):
    """The document is nested too deeply or expands to too many values."""


def check_limits(text: str) -> None:
    """Raise YamlLimitError where ``text`` nests deeper than ``MAX_DEPTH`` or expands, with its
    aliases, to more than ``MAX_VALUES`` values; YAML syntax errors are left to the parser.
    """
    sizes: dict[str, int] = {}  # anchor -> values it stands for
    open_at: list[tuple[str | None, int]] = []  # each open collection: anchor, count at start
    count = 0
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent):
                count += sizes.get(event.anchor, 1)
            elif isinstance(event, yaml.ScalarEvent):
                count += 1
                if event.anchor is not None:
                    sizes[event.anchor] = 1
            elif isinstance(event, yaml.CollectionStartEvent):
                count += 1
                open_at.append((event.anchor, count))
                if len(open_at) > MAX_DEPTH:
                    raise YamlLimitError(
                        f"YAML nested more than {MAX_DEPTH} levels deep at line "
                        f"{event.start_mark.line + 1}"
                    )
            elif isinstance(event, yaml.CollectionEndEvent):
                anchor, started = open_at.pop()
                if anchor is not None:
                    sizes[anchor] = count - started + 1
            if count > MAX_VALUES:
                raise YamlLimitError(
                    f"YAML expands to more than {MAX_VALUES:,} values (aliases included) by "
                    f"line {event.start_mark.line + 1}"
                )
    except yaml.YAMLError:
        return  # the parser reports it, with its line


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` of a document within the limits (YamlLimitError otherwise)."""
    check_limits(text)
    return yaml.safe_load(text)
