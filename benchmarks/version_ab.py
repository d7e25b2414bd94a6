"""Two versions of one kernel, each at its own tuned best, measured side by side in one run.

A kernel-source change is a new version with a space of its own, so "is the new one faster" is
a question about the best each version's search found: this takes the best verified config of
every workload in each database (the version tuned last on this device there), rebuilds both
versions from the databases' stored sources, and measures them alternately on the same
device, so that a slow spell of a shared machine falls on both.

    python benchmarks/version_ab.py --kernel conv2d_depthwise_rows \
        --before sqlite:////tmp/old.db --after sqlite:////tmp/new.db --rounds 5
"""

from __future__ import annotations

import argparse
import json
import statistics

from octune.catalogue.registry import KernelSpec, kernel_from_texts
from octune.core.results import Status
from octune.db.store import Store
from octune.tuner.device import DeviceInfo, select_device
from octune.tuner.measure import DeviceRunner

Shape = dict[str, int]


def tuned(
    url: str, kernel: str, fingerprint: str
) -> tuple[KernelSpec, dict[str, tuple[Shape, Shape]]]:
    """The version last tuned on the device, and its best (shape, config) per workload key."""
    store = Store(url)
    stored = store.lookup_kernel(fingerprint, kernel)
    if stored is None:
        raise SystemExit(f"{url}: no tuned version of {kernel} on this device")
    spec = kernel_from_texts(kernel, stored.template_source, stored.space_source)
    best = store.best_per_workload(fingerprint, kernel, stored.sha256)
    return spec, {row.workload_key: (row.shape, row.config) for row in best}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernel", required=True)
    parser.add_argument("--before", required=True, help="database URL of the earlier version")
    parser.add_argument("--after", required=True, help="database URL of the later version")
    parser.add_argument("--device", help="OpenCL device (index or name substring)")
    parser.add_argument("--rounds", type=int, default=5, help="alternate measurements each")
    parser.add_argument("--out", help="JSON results")
    args = parser.parse_args()

    device = select_device(args.device)
    fingerprint = DeviceInfo.from_cl(device).fingerprint
    (old, old_best), (new, new_best) = (
        tuned(url, args.kernel, fingerprint) for url in (args.before, args.after)
    )
    rows = []
    print(f"{'workload':60} {'before us':>10} {'after us':>10} {'after/before':>12}")
    for key in sorted(old_best.keys() & new_best.keys()):
        shape = old_best[key][0]
        workload = old.family.workload(shape)
        runners = [DeviceRunner(device, spec, workload, seed=0) for spec in (old, new)]
        configs = (old_best[key][1], new_best[key][1])
        times: list[list[float]] = [[], []]
        for _ in range(args.rounds):
            for side, (runner, config) in enumerate(zip(runners, configs, strict=True)):
                found = runner.measure(config)
                if found.status is not Status.OK or found.median_s is None:
                    raise SystemExit(f"{key}: {found.status.value} {found.message}")
                times[side].append(found.median_s)
        before, after = (statistics.median(t) for t in times)
        rows.append({"workload": key, "before": configs[0], "after": configs[1],
                     "before_s": before, "after_s": after})  # fmt: skip
        print(f"{key.split('|')[0][:60]:60} {before * 1e6:10.1f} {after * 1e6:10.1f} "
              f"{after / before:12.2f}")  # fmt: skip
    total = [sum(row[f"{side}_s"] for row in rows) for side in ("before", "after")]
    print(f"{'sum over ' + str(len(rows)) + ' workloads':60} {total[0] * 1e6:10.1f} "
          f"{total[1] * 1e6:10.1f} {total[1] / total[0]:12.2f}")  # fmt: skip
    if args.out:
        with open(args.out, "w") as handle:
            json.dump({"kernel": args.kernel, "device": device.name, "rows": rows}, handle)


if __name__ == "__main__":
    main()
