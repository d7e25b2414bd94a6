"""Versions of a config measured against each other in turns, for the A/B scripts."""

from __future__ import annotations

from octune.tuner.measure import DeviceRunner

TURNS = 3  # measurements of each version, alternating; the fastest median of each is kept


def in_turns(
    trials: dict[str, tuple[DeviceRunner, dict[str, int]]],
) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Each labelled (runner, config) measured TURNS times in alternation, so that a drift of
    the device's clocks falls on all alike: the median times of each, and why any failed (a
    failed one is not measured again).
    """
    times: dict[str, list[float]] = {label: [] for label in trials}
    failed: dict[str, str] = {}
    for _ in range(TURNS):
        for label, (runner, config) in trials.items():
            if label in failed:
                continue
            measurement = runner.measure(config)
            if measurement.ok and measurement.median_s:
                times[label].append(measurement.median_s)
            else:
                failed[label] = f"{measurement.status.value}: {measurement.message[:300]}"
    return times, failed
