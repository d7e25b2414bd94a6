"""A network's tuning budget by estimated or by measured time (issue 63, item 3), side by side
in one run: the same network, batch and budget tuned into fresh databases with the second
round weighted by the estimate (each layer's flops or traffic) or by what the first round
measured (``tuner.campaign.measured_weights``), alternating A B A B; then each layer's best
stored config re-run (``DeviceRunner``, verified), times its launches per pass, summed.

    .venv/bin/python benchmarks/budget_weights.py --device 0 --net squeezenet1.1 --batch 8 \\
        --seconds 60 --rounds 2 --out /tmp/weights.json
    benchmarks/device_run.sh python3 benchmarks/budget_weights.py --device NVIDIA \\
        --net resnet50 --batch 32 --seconds 120 --rounds 1 --out $OUT/weights.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import replace
from pathlib import Path

import pyopencl as cl

from octune.db.store import Store
from octune.networks.workloads import network_layers, network_tasks
from octune.tuner.campaign import Task, for_device, tune_in_turn
from octune.tuner.device import DeviceInfo, select_device
from octune.tuner.measure import DeviceRunner
from octune.tuner.session import Budget, SessionReport, Settings, run_session
from octune.tuner.workers import Workers


def tune(store: Store, info: DeviceInfo, tasks: list[Task], seconds: float) -> None:
    def one(
        task: Task, part: Budget, workers: Workers, settings: Settings, place: str
    ) -> SessionReport:
        table = task.kernel.space.enumerate(info.limits)
        return run_session(store, info, task.kernel, task.workload, table, strategy="model",
                           budget=part, settings=settings, seed=0, workers=workers)  # fmt: skip

    settings = Settings(confirm=1)
    for _ in tune_in_turn(tasks, Budget(seconds=seconds), one, device=info, settings=settings):
        pass


def network_seconds(
    store: Store, device: cl.Device, info: DeviceInfo, tasks: list[Task]
) -> tuple[float, int]:
    """Sum over layers of launches x the fastest re-run best config of any of its kernels,
    and how many layers had none verified (their time is not in the sum: compare runs only
    where that is 0).
    """
    fastest: dict[str, float] = {}
    for task in tasks:
        best = store.best(info.fingerprint, task.kernel.name, task.workload.key, task.kernel.sha256)
        if best is None:
            continue
        runner = DeviceRunner(device, task.kernel, task.workload, seed=7, repeats=20,
                              max_seconds=0.3)  # fmt: skip
        result = runner.measure(best.config)
        if result.ok and result.median_s:
            key = task.workload.key
            fastest[key] = min(
                fastest.get(key, float("inf")), result.median_s * (task.launches or 1)
            )
    missing = {task.workload.key for task in tasks} - set(fastest)
    if missing:
        print(f"  {len(missing)} layers without a verified config", flush=True)
    return sum(fastest.values()), len(missing)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--net", default="squeezenet1.1")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    device = select_device(args.device)
    info = DeviceInfo.from_cl(device)
    layers, _ = network_layers(args.net, args.batch, {})
    measured, _ = for_device(network_tasks(layers), info.device_type)
    arms = {"estimated": [replace(task, launches=None) for task in measured], "measured": measured}
    runs = []
    for turn in range(args.rounds):
        for arm, tasks in arms.items():
            with tempfile.TemporaryDirectory() as folder:
                store = Store(f"sqlite:///{folder}/tuned.db")
                tune(store, info, tasks, args.seconds)
                seconds, missing = network_seconds(store, device, info, measured)
                store.close()
            runs.append({"round": turn, "weights": arm, "network_ms": 1e3 * seconds,
                         "layers_without_config": missing})  # fmt: skip
            print(f"round {turn} {arm}: {1e3 * seconds:.3f} ms", flush=True)
            args.out.write_text(json.dumps({"device": info.name, "net": args.net,
                                            "batch": args.batch, "seconds": args.seconds,
                                            "runs": runs}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
