"""Answers across batch sizes (issue 63): how near the configs a database tuned at one batch
answers at other batches come to what tuning each batch finds, per network, in one run.

    benchmarks/device_run.sh python3 benchmarks/cross_batch.py --device NVIDIA \\
        --nets resnet50 bert_base_layer --base-seconds 60 --batches 8 16 32 \\
        --dir $OUT --out $OUT/cross_batch.json [--tune-seconds 60] [--base-dir DIR]
    .venv/bin/python benchmarks/cross_batch.py --ranks \\
        benchmarks/data/h200_cross_batch/call_a.json --base-dir benchmarks/data/h200_cross_batch \\
        --dir /tmp --out /dev/null

1. ``octune tune --model NET --batch BASE --time S`` into a fresh database (the base), or the
   base a previous run left in ``--base-dir``.
2. For each batch B and distinct layer, the config each policy answers from the base, run and
   verified on the device (``DeviceRunner``: median of profiled runs), times its launches per
   pass:
   ``nearest``  what ``octune run --db`` answers (``StoreLookup``: here, the same layer at the
                base batch);
   ``model``    the cost model trained on the base (``ModelAnswers``), scoring every verified
                config at the layer's own shape, also beyond the range of the tuned shapes;
   ``folded``   conv2d only: the nearest tuned layer with the same window by the convolution's
                GEMM view (output channels, n*oh*ow, c*r*s/groups), where batch and pixels are
                one dimension; GEMM layers fold their batch into M already;
   ``confirmed``  the runtime's first-use confirmation (``runtime.sources.confirm``): each
                kernel's answer run and verified, the fastest kept;
   ``confirmed-near``  the same, with each kernel's configs of the ``CONFIRM_NEIGHBOURS``
                nearest tuned shapes beside its answer (the seconds both take are recorded);
   ``confirmed-model``  ``confirmed-near`` with each kernel's cost-model pick at the layer's
                shape beside them;
   ``confirmed-starts``  the runtime's confirmation as it is: ``confirmed-model`` with each
                kernel's shipped starts for the device type beside them;
   ``history``  every config the base verified at each kernel's ``CONFIRM_NEIGHBOURS`` nearest
                tuned shapes, not only each one's best: what the base holds near the layer at
                all (per config also its time there, so that rankings of them can be judged
                without the device);
   ``best``     per layer the fastest of those measured.
3. With ``--ranks RUN.json`` instead (no device needed), for each layer of an earlier run, where
   the fastest policy's config stands among the distinct legal configs of the tuned shapes
   nearest it in the base (``KernelIndex.neighbours``): how many a confirmation must run.
4. With ``--tune-seconds``, a copy of the base tuned at B (``tune --model NET --batch B``), its
   exact answers measured alike: the reference the policies are divided by; or, with
   ``--tuned-dir``, the copy an earlier run tuned (``NET_bB.db[.gz]``), measured in this run.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lib.runs import read_run

from octune.catalogue.family import OperandMemo
from octune.catalogue.registry import family, load_kernel
from octune.db.store import Store
from octune.lookup.data import Entry, LookupTable, Query, QueryError
from octune.lookup.predictor import DeviceModel, ModelAnswers
from octune.lookup.semantics import KernelIndex
from octune.lookup.tables import StoreLookup, build_table, resolve_device, stored_shape
from octune.networks.workloads import network_layers
from octune.runtime.config_sources import CONFIRM_NEIGHBOURS, Choice, StoreConfigs, confirm
from octune.tuner.device import DeviceInfo, select_device
from octune.tuner.measure import RunnerChain
from octune.tuner.programs import ProgramCache

#: The confirmations compared: (policy, nearest shapes' configs per kernel, model pick, starts).
CONFIRMATIONS = (
    ("confirmed", 0, False, False),
    ("confirmed-near", CONFIRM_NEIGHBOURS, False, False),
    ("confirmed-model", CONFIRM_NEIGHBOURS, True, False),
    ("confirmed-starts", CONFIRM_NEIGHBOURS, True, True),
)
POLICIES = (
    "nearest",
    "model",
    "folded",
    "confirmed",
    "confirmed-near",
    "confirmed-model",
    "confirmed-starts",
    "history",
)


def tune(net: str, batch: int, seconds: float, db: Path, device: str) -> float:
    started = time.perf_counter()
    command = [sys.executable, "-m", "octune", "tune", "--model", net, "--batch", str(batch),
               "--time", f"{seconds}s", "--device", device, "--db", f"sqlite:///{db}"]  # fmt: skip
    with (db.parent / f"{db.stem}.log").open("w") as log:
        subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT)
    return time.perf_counter() - started


def gemm_view(shape: Mapping[str, int]) -> tuple[int, int, int]:
    """A convolution as implicit GEMM: output channels, output pixels of the batch, reduction."""
    extent = shape["dilation"] * (shape["r"] - 1) + 1
    oh = (shape["h"] + 2 * shape["pad"] - extent) // shape["stride"] + 1
    ow = (shape["w"] + 2 * shape["pad"] - extent) // shape["stride"] + 1
    return shape["k"], shape["n"] * oh * ow, shape["c"] * shape["r"] * shape["s"] // shape["groups"]


def window(shape: Mapping[str, int]) -> tuple[int, ...]:
    depthwise = shape["groups"] > 1 and shape["groups"] == shape["c"]
    return (shape["r"], shape["s"], shape["stride"], shape["dilation"], shape["groups"] == 1,
            depthwise, shape["nhwc"])  # fmt: skip


def folded(index: KernelIndex, shape: dict[str, int]) -> tuple[Entry, float] | None:
    """The tuned entry nearest ``shape`` by ``gemm_view`` among those with its window, legal
    for it, with its estimated seconds at ``shape``.
    """
    table = index.table
    keys = table.problem.keys
    point = [math.log2(v) for v in gemm_view(shape)]
    query = tuple(shape[key] for key in keys)
    best: tuple[float, Entry] | None = None
    for entry in table.tuned:
        tuned = dict(zip(keys, entry.shape, strict=True))
        if window(tuned) != window(shape) or index.launch(entry.config, query) is None:
            continue
        distance = sum(
            (a - math.log2(b)) ** 2 for a, b in zip(point, gemm_view(tuned), strict=True)
        )
        if best is None or distance < best[0]:
            best = (distance, entry)
    if best is None:
        return None
    entry = best[1]  # estimated time: the neighbour's GFLOP/s at this shape
    return entry, family(table.problem.name).workload(shape, entry.dtype).flops / (
        entry.gflops * 1e9
    )


class Policies:
    """Each policy's (kernel, config) for a layer, from the base database."""

    def __init__(self, store: Store, fingerprint: str, with_model: bool) -> None:
        self.store = store
        self.with_model = with_model
        self.device = resolve_device(store, fingerprint)
        self.lookup = StoreLookup(store)
        self.models = ModelAnswers()
        self._tables: dict[str, tuple[LookupTable, KernelIndex, DeviceModel | None]] = {}
        self._measured: dict[str, dict[tuple[int, ...], list[tuple[dict[str, int], float]]]] = {}

    def _kernel(self, name: str) -> tuple[LookupTable, KernelIndex, DeviceModel | None]:
        if name not in self._tables:
            table = build_table(self.store, self.device, name, None)
            model = self.models.model(self.store, self.device, table) if self.with_model else None
            self._tables[name] = (table, KernelIndex(table), model)
        return self._tables[name]

    def history(
        self, layer: Any, shapes_per_kernel: int = CONFIRM_NEIGHBOURS
    ) -> list[tuple[str, dict[str, int], float, tuple[int, ...]]]:
        """Each kernel's verified configs at its ``shapes_per_kernel`` nearest tuned shapes,
        legal for ``layer``: (kernel, config, its seconds there, that shape), distinct per kernel.
        """
        found = []
        shape, dtype = layer.shape, layer.dtype
        for name in self.lookup.family_kernels(self.device, layer.family):
            table, index, _ = self._kernel(name)
            if table.dtype != dtype or not table.tuned:
                continue
            if load_kernel(name).takes(layer.workload()) is not None:
                continue
            if name not in self._measured:
                by_shape: dict[tuple[int, ...], list[tuple[dict[str, int], float]]] = {}
                for record in self.store.history(name, table.sha256, self.device.fingerprint):
                    if record.time_s:
                        key = stored_shape(table.problem, record.workload)
                        by_shape.setdefault(key, []).append((record.config, record.time_s))
                self._measured[name] = by_shape
            query = tuple(shape[key] for key in table.problem.keys)
            shapes = sorted({entry.shape for entry in table.tuned if entry.dtype == dtype},
                            key=lambda tuned: index.distance(query, tuned))  # fmt: skip
            seen: set[tuple[tuple[str, int], ...]] = set()
            for tuned in shapes[:shapes_per_kernel]:
                for config, seconds in sorted(self._measured[name].get(tuned, []),
                                              key=lambda pair: pair[1]):  # fmt: skip
                    key = tuple(sorted(config.items()))
                    values = tuple(config[p] for p in table.parameters)
                    if key in seen or index.launch(values, query) is None:
                        continue
                    seen.add(key)
                    found.append((name, config, seconds, tuned))
        return found

    def answers(
        self, family: str, shape: dict[str, int], dtype: str
    ) -> dict[str, tuple[str, dict[str, int]]]:
        chosen: dict[str, tuple[str, dict[str, int]]] = {}
        try:
            answer = self.lookup.lookup(self.device, Query(family, shape, dtype))
            chosen["nearest"] = (answer.kernel, answer.config)
        except QueryError as error:
            print(f"  nearest: {error}", flush=True)
        by_model: list[tuple[float, str, dict[str, int]]] = []
        by_fold: list[tuple[float, str, dict[str, int]]] = []
        for name in self.lookup.family_kernels(self.device, family):
            table, index, model = self._kernel(name)
            if table.dtype != dtype or not table.tuned:
                continue
            query = tuple(shape[key] for key in table.problem.keys)
            if model is not None and self.with_model:
                prediction = next(model.predict([query]))
                if prediction is not None:
                    config = dict(zip(table.parameters, prediction.config, strict=True))
                    by_model.append((prediction.time_s, name, config))
            if family == "conv2d":
                found = folded(index, shape)
                if found is not None:
                    entry, seconds = found
                    by_fold.append(
                        (seconds, name, dict(zip(table.parameters, entry.config, strict=True)))
                    )
        for policy, options in (("model", by_model), ("folded", by_fold)):
            if options:
                _, name, config = min(options, key=lambda option: option[0])
                chosen[policy] = (name, config)
        if "folded" not in chosen and "nearest" in chosen:
            chosen["folded"] = chosen["nearest"]
        return chosen


class Timings:
    """Each config's median seconds on a layer (None where it fails), measured once per run.
    Its runners share one OpenCL context and the layer's operands (``RunnerChain``).
    """

    def __init__(self, device: Any) -> None:
        self.device = device
        self.chain = RunnerChain(OperandMemo(size=1))
        self.seconds: dict[tuple[str, str, str], float | None] = {}

    def measure(self, kernel: str, config: dict[str, int], layer: Any) -> float | None:
        key = (kernel, json.dumps(layer.shape, sort_keys=True), json.dumps(config, sort_keys=True))
        if key not in self.seconds:
            runner = self.chain.runner(self.device, load_kernel(kernel), layer.workload(),
                                       seed=7, repeats=20, max_seconds=0.3)  # fmt: skip
            result = runner.measure(config)
            self.seconds[key] = result.median_s if result.ok and result.median_s else None
            if self.seconds[key] is None:
                print(f"  {kernel} {config}: {result.status}", flush=True)
        return self.seconds[key]


def confirmed(source: StoreConfigs, device: Any, cache: ProgramCache, layer: Any,
              neighbours: int, predicted: bool, starts: bool,
              ) -> tuple[tuple[str, dict[str, int]], float]:  # fmt: skip
    """What the runtime's confirmed policy runs the layer with, and the seconds it took: its
    candidates built ahead in builder processes, then measured, as ``octune run`` confirms
    (builds an earlier policy made come from ``cache``).
    """
    started = time.perf_counter()
    (answer,) = source.answers(layer.family, [layer.shape], layer.dtype)
    choice = Choice(source.kernel(answer), dict(answer.config), answer.match)
    chosen = confirm(source, layer.family, layer.workload(), choice, device, cache,
                     neighbours=neighbours, predicted=predicted, starts=starts)  # fmt: skip
    return (chosen.kernel.name, chosen.config), time.perf_counter() - started


def evaluate(policies: Policies, chosen_policies: list[str], device: Any, net: str, batch: int,
             tuned: Store | None, tuned_fp: str | None,
             history_shapes: int = CONFIRM_NEIGHBOURS) -> dict[str, Any]:  # fmt: skip
    layers, _ = network_layers(net, batch, {})
    timings = Timings(device)
    rows = []
    totals = dict.fromkeys((*chosen_policies, "best", "tuned"), 0.0)
    load_s = dict.fromkeys((p for p, *_ in CONFIRMATIONS if p in chosen_policies), 0.0)
    source = StoreConfigs(policies.store, DeviceInfo.from_cl(device))
    builds = ProgramCache()
    reference = StoreLookup(tuned) if tuned is not None else None
    reference_device = resolve_device(tuned, tuned_fp) if tuned is not None and tuned_fp else None
    for layer in layers:
        chosen = {
            policy: answer
            for policy, answer in policies.answers(layer.family, layer.shape, layer.dtype).items()
            if policy in chosen_policies
        }
        for policy, *how in CONFIRMATIONS:
            if policy in chosen_policies:
                chosen[policy], seconds = confirmed(source, device, builds, layer, *how)
                load_s[policy] += seconds
        times = {p: timings.measure(k, c, layer) for p, (k, c) in chosen.items()}
        measured_history = []
        if "history" in chosen_policies:
            for kernel, config, base_s, base_shape in policies.history(layer, history_shapes):
                seconds = timings.measure(kernel, config, layer)
                measured_history.append([kernel, config, base_s, list(base_shape), seconds])
            timed = [entry for entry in measured_history if entry[4] is not None]
            if timed:
                fastest = min(timed, key=lambda entry: entry[4])
                chosen["history"] = (fastest[0], fastest[1])
                times["history"] = fastest[4]
        if reference is not None and reference_device is not None:
            answer = reference.lookup(
                reference_device, Query(layer.family, layer.shape, layer.dtype)
            )
            times["tuned"] = timings.measure(answer.kernel, answer.config, layer)
            times["tuned_match"] = answer.match  # type: ignore[assignment]
        found = [t for p, t in times.items() if p in chosen_policies and isinstance(t, float)]
        times["best"] = min(found) if found else None
        for policy in totals:
            value = times.get(policy)
            if isinstance(value, float):
                totals[policy] += layer.count * value
        chosen_as_lists = {policy: list(answer) for policy, answer in chosen.items()}
        rows.append({"family": layer.family, "shape": layer.shape, "count": layer.count,
                     "times": times, "chosen": chosen_as_lists,
                     "history": measured_history})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)  # a killed run keeps what it measured
    return {"net": net, "batch": batch, "totals_s": totals, "confirm_s": load_s, "layers": rows}


def ranks(run_file: Path, base_dir: Path) -> None:
    """Print each conv/GEMM layer's winning config's rank among its nearest shapes' configs."""
    for run in json.loads(run_file.read_text())["runs"]:
        name = Path(run["net"]).name
        base = Path(tempfile.gettempdir()) / f"{name}_ranks.db"
        base.write_bytes(read_run(base_dir / f"{name}.db.gz"))
        store = Store(f"sqlite:///{base}")
        (fingerprint,) = {device.fingerprint for device in store.stored_devices()}
        device = resolve_device(store, fingerprint)
        found = []
        for layer in run["layers"]:
            times = {
                p: t for p, t in layer["times"].items() if p in POLICIES and isinstance(t, float)
            }
            if not times:
                continue
            kernel, config = layer["chosen"][min(times, key=times.__getitem__)]
            index = KernelIndex(build_table(store, device, kernel, None))
            query = Query(kernel, layer["shape"], "float32")
            try:
                nearest = index.neighbours(query, len(index.table.tuned))
            except QueryError:  # a config of another kernel version or shape rule
                nearest = []
            configs = [dict(zip(index.table.parameters, c, strict=True)) for c in nearest]
            found.append(configs.index(config) if config in configs else None)
        print(f"{run['net']} batch {run['batch']}: ranks {found}")


def unpack(folder: Path, name: str, to: Path) -> None:
    """``folder``'s ``name`` (or ``name``.gz, unpacked) copied to ``to``."""
    packed = folder / f"{name}.gz"
    to.write_bytes(read_run(packed if packed.exists() else folder / name))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="NVIDIA")
    parser.add_argument("--nets", nargs="+", default=["resnet50", "bert_base_layer"])
    parser.add_argument("--base-batch", type=int, default=1)
    parser.add_argument("--base-seconds", type=float, default=60)
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--tune-seconds", type=float, default=0)
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--base-dir", type=Path, help="bases of an earlier run, NET.db[.gz]")
    parser.add_argument(
        "--tuned-dir",
        type=Path,
        help="tuned copies of an earlier run, NET_bB.db[.gz], instead of tuning",
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--policies", nargs="+", choices=POLICIES, default=list(POLICIES))
    parser.add_argument("--ranks", type=Path, help="an earlier run's JSON: ranks only")
    parser.add_argument(
        "--history-shapes", type=int, default=CONFIRM_NEIGHBOURS,
        help="history: the nearest tuned shapes per kernel whose every config is run",
    )  # fmt: skip
    args = parser.parse_args()
    if args.ranks is not None:
        ranks(args.ranks, args.base_dir)
        return
    args.dir.mkdir(parents=True, exist_ok=True)
    device = select_device(args.device)
    info = DeviceInfo.from_cl(device)
    runs = []
    for net in args.nets:
        name = Path(net).name  # a file's databases go in --dir, whatever folder it is in
        base = args.dir / f"{name}.db"
        if args.base_dir is not None:
            unpack(args.base_dir, base.name, base)
        else:
            print(f"{net}: tuning batch {args.base_batch}", flush=True)
            tune(net, args.base_batch, args.base_seconds, base, args.device)
        policies = Policies(Store(f"sqlite:///{base}"), info.fingerprint, "model" in args.policies)
        for batch in args.batches:
            tuned = None
            if args.tuned_dir is not None:
                copy = args.dir / f"{name}_b{batch}.db"
                unpack(args.tuned_dir, copy.name, copy)
                tuned = Store(f"sqlite:///{copy}")
            elif args.tune_seconds:
                copy = args.dir / f"{name}_b{batch}.db"
                shutil.copyfile(base, copy)
                print(f"{net}: tuning batch {batch}", flush=True)
                tune(net, batch, args.tune_seconds, copy, args.device)
                tuned = Store(f"sqlite:///{copy}")
            run = evaluate(policies, args.policies, device, net, batch, tuned, info.fingerprint,
                           args.history_shapes)  # fmt: skip
            totals = run["totals_s"]
            print(f"{net} batch {batch}: " + ", ".join(
                f"{p} {1e3 * t:.3f} ms" for p, t in totals.items()) + "; confirmations took "
                + ", ".join(f"{p} {t:.1f} s" for p, t in run["confirm_s"].items()),
                flush=True)  # fmt: skip
            runs.append(run)
            args.out.write_text(json.dumps({"device": info.name, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
