"""How far a session's confirmed times sit from its search times, for two octune installs side
by side: each round runs the README's first tuning command once per install, alternately, each
in a fresh SQLite database, and prints confirmed / search time of the session's top configs.

An install is an ``octune`` executable: build one from an older commit to compare protocols.

    python benchmarks/confirm_spread.py --octune /tmp/old/bin/octune .venv/bin/octune --rounds 4
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

TUNE = ["tune", "gemm", "--m", "256", "--n", "256", "--k", "256", "--budget", "20"]

#: Search session 1, its confirm session 2: each confirmed config's two median times.
PAIRS = """
SELECT search.median_s, confirm.median_s FROM measurements AS search
JOIN measurements AS confirm ON search.config_key = confirm.config_key
WHERE search.session_id = 1 AND confirm.session_id = 2 ORDER BY search.median_s
"""


def session(octune: str) -> tuple[float, list[float]]:
    """One tuning session in a fresh data folder: its wall seconds and confirm / search ratios."""
    with tempfile.TemporaryDirectory() as home:
        started = time.perf_counter()
        env = {**os.environ, "XDG_DATA_HOME": home}
        subprocess.run([octune, *TUNE], env=env, check=True, capture_output=True)
        seconds = time.perf_counter() - started
        with sqlite3.connect(Path(home) / "octune" / "octune.db") as db:
            ratios = [confirm / search for search, confirm in db.execute(PAIRS)]
    return seconds, ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--octune", nargs="+", required=True, help="octune executables")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", type=Path, help="JSON results")
    args = parser.parse_args()
    results: dict[str, list[dict[str, object]]] = {name: [] for name in args.octune}
    for round_ in range(args.rounds):
        for name in args.octune:
            seconds, ratios = session(name)
            results[name].append({"seconds": seconds, "ratios": ratios})
            shown = " ".join(f"{r:.2f}" for r in ratios)
            print(f"round {round_ + 1} {name}: {seconds:.1f} s, confirmed / search {shown}")
    for name, runs in results.items():
        ratios = [r for run in runs for r in run["ratios"]]  # type: ignore[attr-defined]
        within = sum(abs(r - 1) <= 0.15 for r in ratios)
        print(
            f"{name}: {within} of {len(ratios)} within 15 %, from {min(ratios):.2f} to "
            f"{max(ratios):.2f}; median session "
            f"{statistics.median(run['seconds'] for run in runs):.1f} s"  # type: ignore[misc]
        )
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
