"""User-facing errors: each carries one line that names the problem and the fix.

The CLI prints ``str(error)`` and exits with the error's ``exit_code`` (docs/commands.md, "Exit
status"); anything that is not an ``OctuneError`` is a bug in octune and keeps its traceback.
"""

import re
from typing import Any, ClassVar


class OctuneError(Exception):
    """A mistake in the user's input or environment, explained in one line."""

    #: 2: the command line or an input it names is wrong (click's own usage errors exit so).
    exit_code: ClassVar[int] = 2


class CheckError(OctuneError):
    """The work ran and its results failed their check: no config verified, a model's output
    disagrees with onnxruntime.
    """

    exit_code = 1


class SpaceError(OctuneError):
    """A search-space YAML that cannot be used (syntax, unknown names, no legal config)."""


class DeviceError(OctuneError):
    """No OpenCL platform, or no device matching the user's choice."""

    exit_code = 3


class StoreError(OctuneError):
    """The database cannot be opened, migrated or written."""

    exit_code = 4


class WorkloadError(OctuneError):
    """A problem shape that the kernel cannot accept (for example M < 1)."""


def validation_message(item: Any) -> str:
    """One pydantic problem's message as a user can act on it: without pydantic's
    "Value error, " prefix, and without the name of octune's schema class in "a valid
    dictionary or instance of SpaceModel".
    """
    return re.sub(r" or instance of \w+", "", str(item["msg"]).removeprefix("Value error, "))
