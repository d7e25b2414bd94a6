"""A network's tuning budget by estimated or by measured time (issue 63, item 3): the same
network, batch and budget tuned into fresh databases with the second round weighted by the
estimate (each layer's flops or traffic) or by what the first round measured
(``tuner.campaign.measured_weights``); then, in one process on one device, each layer's best
stored config of every database re-run (verified, by one ``RunnerChain``), its launches per
pass times the fastest, summed, the databases taken in turn A B A B.

Tuning and comparing are two steps, so the arms can be tuned at once on two cards of one host
and compared on one of them; a third, ``spent``, reads where each database's budget went:

    .venv/bin/python benchmarks/budget_weights.py tune --device 0 --net squeezenet1.1 \\
        --batch 8 --seconds 60 --weights measured --db /tmp/w/measured.db
    .venv/bin/python benchmarks/budget_weights.py compare --device 0 --net squeezenet1.1 \\
        --batch 8 --dbs /tmp/w/estimated.db /tmp/w/measured.db --repeat 2 --out /tmp/w.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pyopencl as cl
from lib.runs import read_run

from octune.catalogue.family import OperandMemo
from octune.db.store import Store
from octune.networks.workloads import network_layers, network_tasks
from octune.tuner.campaign import Task, for_device, tune_in_turn
from octune.tuner.device import DeviceInfo, select_device
from octune.tuner.measure import RunnerChain
from octune.tuner.session import Budget, SessionReport, Settings, run_session
from octune.tuner.workers import Workers

WEIGHTS = ("estimated", "measured")


def network_tasks_for(net: str, batch: int, device_type: str) -> list[Task]:
    layers, _ = network_layers(net, batch, {})
    tasks, _ = for_device(network_tasks(layers), device_type)
    return tasks


@contextmanager
def kept_stores(paths: list[Path]) -> Iterator[dict[Path, Store]]:
    """Kept databases, open: each a temporary copy, unpacked where gzipped (``benchmarks/data``)."""
    with tempfile.TemporaryDirectory() as folder:
        stores = {}
        for index, path in enumerate(paths):
            copy = Path(folder) / f"{index}.db"
            copy.write_bytes(read_run(path))
            stores[path] = Store(f"sqlite:///{copy}")
        try:
            yield stores
        finally:
            for store in stores.values():
                store.close()


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
    store: Store, device: cl.Device, info: DeviceInfo, tasks: list[Task], chain: RunnerChain
) -> tuple[float, int]:
    """Sum over layers of launches x the fastest re-run best config of any of its kernels,
    and how many layers had none verified (their time is not in the sum: compare runs only
    where that is 0). The runners come from ``chain``: one OpenCL context, a layer's operands
    made once for its kernels.
    """
    fastest: dict[str, float] = {}
    for task in tasks:
        best = store.best(info.fingerprint, task.kernel.name, task.workload.key, task.kernel.sha256)
        if best is None:
            continue
        runner = chain.runner(device, task.kernel, task.workload, seed=7, repeats=20,
                              max_seconds=0.3)  # fmt: skip
        result = runner.measure(best.config)
        if result.ok and result.median_s:
            key = task.workload.key
            fastest[key] = min(
                fastest.get(key, float("inf")), result.median_s * (task.launches or 1)
            )
    missing = {task.workload.key for task in tasks} - set(fastest)
    return sum(fastest.values()), len(missing)


def tune_arm(args: argparse.Namespace) -> None:
    """One arm into a fresh database: ``estimated`` drops the layers' launches, so the second
    round keeps the estimate (``measured_weights`` weighs only where every task has them).
    """
    info = DeviceInfo.from_cl(select_device(args.device))
    tasks = network_tasks_for(args.net, args.batch, info.device_type)
    if args.weights == "estimated":
        tasks = [replace(task, launches=None) for task in tasks]
    if args.db.exists():
        raise SystemExit(f"{args.db} exists: each arm tunes into a fresh database")
    args.db.parent.mkdir(parents=True, exist_ok=True)
    store = Store(f"sqlite:///{args.db}")
    started = time.monotonic()
    tune(store, info, tasks, args.seconds)
    store.close()
    print(f"{args.weights}: tuned {args.seconds:g} s in {time.monotonic() - started:.0f} s")


def compare(args: argparse.Namespace) -> None:
    """Kept databases' network times, re-run in turn in this one process."""
    device = select_device(args.device)
    info = DeviceInfo.from_cl(device)
    tasks = network_tasks_for(args.net, args.batch, info.device_type)
    runs, chain = [], RunnerChain(OperandMemo(size=1))
    with kept_stores(args.dbs) as stores:
        for turn in range(args.repeat):
            for path, store in stores.items():
                seconds, missing = network_seconds(store, device, info, tasks, chain)
                runs.append({"turn": turn, "db": path.name, "network_ms": 1e3 * seconds,
                             "layers_without_config": missing})  # fmt: skip
                print(f"turn {turn} {path.name}: {1e3 * seconds:.3f} ms, {missing} layers "
                      "without a verified config", flush=True)  # fmt: skip
                record = {"device": info.name, "net": args.net, "batch": args.batch, "runs": runs}
                args.out.write_text(json.dumps(record, indent=1))


def spent(args: argparse.Namespace) -> None:
    """Where each database's budget went, layer by layer, read from the databases alone: the
    configs measured (all kernels) and launches x the stored best, beside each layer's
    estimated share of the network.
    """
    with kept_stores(args.dbs) as stores:
        device = next(iter(stores.values())).stored_devices()[0]
        tasks = network_tasks_for(args.net, args.batch, device.device_type)
        layers: dict[str, list[Task]] = {}
        for task in tasks:
            layers.setdefault(task.workload.key, []).append(task)
        total = sum(task.weight for task in tasks)
        print(f"| layer | launches | estimated share | "
              f"{' | '.join(f'{path.name}: configs, ms' for path in stores)} |")  # fmt: skip
        sums = dict.fromkeys(stores, 0.0)
        by_weight = sorted(layers.items(), key=lambda item: -sum(t.weight for t in item[1]))
        for key, of_layer in by_weight:
            row = [key.split("|")[0], str(of_layer[0].launches),
                   f"{sum(task.weight for task in of_layer) / total:.3f}"]  # fmt: skip
            for path, store in stores.items():
                found = [best for task in of_layer
                         if (best := store.best(device.fingerprint, task.kernel.name, key,
                                                task.kernel.sha256)) is not None]  # fmt: skip
                fastest = min((best.median_s for best in found if best.median_s), default=0.0)
                ms = 1e3 * fastest * (of_layer[0].launches or 1)
                sums[path] += ms
                row.append(f"{sum(best.measured for best in found)}, {ms:.3f}")
            print(f"| {' | '.join(row)} |")
        print(f"| sum | | | {' | '.join(f'{ms:.3f}' for ms in sums.values())} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    steps = {"tune": tune_arm, "compare": compare, "spent": spent}
    parsers = parser.add_subparsers(dest="step", required=True)
    for name, step_of in steps.items():
        step = parsers.add_parser(name, help=(step_of.__doc__ or "").splitlines()[0])
        if name != "spent":  # it reads the device from the databases
            step.add_argument("--device", default=None)
        step.add_argument("--net", default="squeezenet1.1")
        step.add_argument("--batch", type=int, default=8)
    parsers.choices["tune"].add_argument("--weights", choices=WEIGHTS, required=True)
    parsers.choices["tune"].add_argument("--seconds", type=float, default=60)
    parsers.choices["tune"].add_argument("--db", type=Path, required=True)
    for name in ("compare", "spent"):
        parsers.choices[name].add_argument("--dbs", type=Path, nargs="+", required=True)
    parsers.choices["compare"].add_argument("--repeat", type=int, default=2)
    parsers.choices["compare"].add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    steps[args.step](args)


if __name__ == "__main__":
    main()
