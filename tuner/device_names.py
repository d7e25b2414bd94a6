"""How a user names a device, for devices on this machine and devices in a database alike.

An exact fingerprint or name wins over a fingerprint prefix, which wins over a name substring:
otherwise "AMD EPYC" (Intel's runtime) would stop resolving as soon as "pthread-AMD EPYC"
(PoCL) is tuned too, and "RTX 4090" beside an "RTX 4090 D".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TypeVar

Device = TypeVar("Device")

#: A fingerprint prefix must be this long to count as one: shorter hex strings ("ab", "e")
#: are more likely parts of a name.
MIN_PREFIX = 4
_HEX = re.compile(r"[0-9a-f]+")


def match_devices(
    choice: str,
    devices: Sequence[Device],
    fingerprint: Callable[[Device], str],
    names: Callable[[Device], Sequence[str]],
) -> list[Device]:
    """The devices `choice` names, from the first tier that names any: an exact fingerprint
    or name (case-insensitive), then a fingerprint prefix, then a name substring. More than
    one is ambiguous, and the caller lists them.
    """
    needle = choice.strip().lower()
    is_prefix = len(needle) >= MIN_PREFIX and _HEX.fullmatch(needle) is not None
    tiers: tuple[Callable[[Device], bool], ...] = (
        lambda d: fingerprint(d) == needle or any(n.lower() == needle for n in names(d)),
        lambda d: is_prefix and fingerprint(d).startswith(needle),
        lambda d: any(needle in n.lower() for n in names(d)),
    )
    for tier in tiers:
        found = [device for device in devices if tier(device)]
        if found:
            return found
    return []
