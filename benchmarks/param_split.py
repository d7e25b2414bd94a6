"""One tuning parameter's share of a tuned database: for every device, kernel and shape, how
many configs each value of the parameter got measured, and the fastest verified time with each.
It answers whether a new parameter value wins where the search put it, from the same run.

    python benchmarks/param_split.py --db sqlite:///squares.db --param ASYNC
"""

from __future__ import annotations

import argparse
from collections import defaultdict

from octune.db.store import Store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="database URL")
    parser.add_argument("--param", required=True, help="a tuning parameter, e.g. ASYNC")
    args = parser.parse_args()
    store = Store(args.db)
    print(f"| device | kernel | shape | {args.param}: measured | {args.param}: fastest us |")
    print("| --- | --- | --- | --- | --- |")
    for device in store.stored_devices():
        for name in store.tuned_kernel_names(device.fingerprint):
            stored = store.lookup_kernel(device.fingerprint, name)
            assert stored is not None  # the name was tuned on this device
            counts: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
            fastest: dict[str, dict[int, float]] = defaultdict(dict)
            for record in store.history(name, stored.sha256, device.fingerprint):
                value = record.config.get(args.param)
                if value is None:
                    continue
                shape = ",".join(f"{k}={v}" for k, v in record.workload.items())
                counts[shape][value] += 1
                if record.time_s is not None:
                    best = fastest[shape].get(value, float("inf"))
                    fastest[shape][value] = min(best, record.time_s)
            for shape in sorted(counts):
                measured = ", ".join(f"{v}: {n}" for v, n in sorted(counts[shape].items()))
                times = ", ".join(f"{v}: {t * 1e6:.1f}" for v, t in sorted(fastest[shape].items()))
                print(f"| {device.name} | {name} | {shape} | {measured} | {times} |")
    store.close()


if __name__ == "__main__":
    main()
