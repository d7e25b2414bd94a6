"""How good is the service's answer for a shape nobody tuned? Leave one tuned shape out (a
copy of the database without its measurements), ask the lookup (the same code, cost model
included, that the server and bundles run) what the gemm family should use for it, then measure
side by side on the device: the service's answer (the fastest estimate over the family's
kernels; their live models score the shape itself, inside the range of the tuned shapes), the
same with the models asked at every shape ("model everywhere", the policy before that range),
a bundle's (the models' answers on a grid of shapes, after tuned neighbours within two
octaves), the nearest tuned shape's best, and the shape's own tuned best (over all kernels).
Estimates can pick the wrong kernel (split-K against plain tiling), so "confirmed" measures
every kernel's answer and keeps the fastest correct one, as the runtime's confirmed policy
does.

    python benchmarks/untuned_shapes.py --device NVIDIA --db tuned.db \
        --shapes 1024x1024x1024 3136x64x576 ...

With --hold-out-all the lookup sees none of the listed shapes (a grid of tuned shapes answers
for a set of held-out ones) instead of all but the one asked about (leave-one-out).

Every shape must already be tuned in --db (e.g. by benchmarks/record_sample.py); each kernel
is measured as the version its table answers for (the last tuned and not retired). Also
printed: the "one config per device" answer that libraries with a
single tuned configuration give (kernel gemm's best config of its largest tuned shape, used for
every shape). A failed measurement counts as 0 GFLOP/s; the row's "failed" says why.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pyopencl as cl
from lib.tuning import without_workloads

from octune.catalogue.family import Workload
from octune.catalogue.registry import KernelSpec, kernel_from_texts, kernels_of, load_kernel
from octune.core.results import Measurement
from octune.db.queries import StoredDevice
from octune.db.store import Store
from octune.kernels.gemm import parse_gemm
from octune.lookup.data import Answer, Entry, LookupTable, Query
from octune.lookup.predictor import ModelAnswers
from octune.lookup.semantics import KernelIndex, best_answer, kernel_answers
from octune.lookup.tables import build_table, resolve_device
from octune.tuner.device import DeviceInfo, select_device
from octune.tuner.measure import DeviceRunner

FAMILY = "gemm"
ONE_CONFIG_KERNEL = "gemm"  # the kernel whose single config "one config per device" uses


@dataclass(frozen=True)
class Asked:
    """What the lookup answered for one held-out shape."""

    service: Answer
    everywhere: Answer  # the service's, were its live model trusted outside the tuned range
    bundle: Answer
    nearest: Answer
    kernels: dict[str, Answer]  # each kernel's own service answer, where it takes the shape


class TrustedEverywhere(KernelIndex):
    """A lookup that asks its model at every shape, outside the range of the tuned ones too:
    the policy before the lookup kept estimates to that range, measured beside it.
    """

    def inside(self, shape: tuple[int, ...], dtype: str) -> bool:
        return True


class SideBySide:
    """One shape's measurements: one runner per kernel (the version its table answers for), and
    each (kernel, config) measured once, so that every column that picks the same config reads
    the same time.
    """

    def __init__(self, device: cl.Device, workload: Workload, kernels: Mapping[str, KernelSpec]):
        self.device = device
        self.workload = workload
        self.kernels = kernels
        self._runners: dict[str, DeviceRunner] = {}
        self._measured: dict[tuple[str, tuple[tuple[str, int], ...]], Measurement] = {}

    def measure(self, kernel: str, config: Mapping[str, int]) -> Measurement:
        key = (kernel, tuple(sorted(config.items())))
        if key not in self._measured:
            if kernel not in self._runners:
                self._runners[kernel] = DeviceRunner(
                    self.device, self.kernels[kernel], self.workload,
                    seed=1, repeats=20, min_repeats=10,
                )  # fmt: skip
            self._measured[key] = self._runners[kernel].measure(config)
        return self._measured[key]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", type=parse_gemm, nargs="+", required=True)
    parser.add_argument("--device", default=None)
    parser.add_argument("--db", required=True, help="an SQLite file tuned with every shape")
    parser.add_argument("--hold-out-all", action="store_true", help="hide every listed shape")
    parser.add_argument("--out", type=Path, default=Path("untuned_shapes.json"))
    args = parser.parse_args()

    cl_device = select_device(args.device)
    info = DeviceInfo.from_cl(cl_device)
    full = Store(f"sqlite:///{args.db}")
    stored_device = resolve_device(full, info.fingerprint)
    tables = {table.kernel: table for table in family_tables(full, stored_device)}
    kernels = table_kernels(full, stored_device, list(tables.values()))
    tuned: dict[str, dict[str, Entry]] = {}  # workload key -> kernel -> its tuned best
    for table in tables.values():
        for entry in table.tuned:
            tuned.setdefault(entry.workload_key, {})[table.kernel] = entry
    if not tables[ONE_CONFIG_KERNEL].tuned:
        raise SystemExit(f"kernel {ONE_CONFIG_KERNEL} is not tuned in {args.db}: tune it first")
    largest = max(tables[ONE_CONFIG_KERNEL].tuned, key=lambda entry: _flops(entry.shape))
    for workload in args.shapes:
        if workload.key not in tuned:
            raise SystemExit(f"{workload} is not tuned in {args.db}: tune it first")
    groups = [args.shapes] if args.hold_out_all else [[workload] for workload in args.shapes]
    asked: dict[str, Asked] = {}
    for group in groups:
        asked.update(ask(Path(args.db), info.fingerprint, group))

    rows = []
    for workload in args.shapes:
        answers = asked[workload.key]
        side = SideBySide(cl_device, workload, kernels)
        measured = {
            "answer": side.measure(answers.service.kernel, answers.service.config),
            "everywhere": side.measure(answers.everywhere.kernel, answers.everywhere.config),
            "bundle": side.measure(answers.bundle.kernel, answers.bundle.config),
            "nearest": side.measure(answers.nearest.kernel, answers.nearest.config),
            "one_config": side.measure(
                ONE_CONFIG_KERNEL, tables[ONE_CONFIG_KERNEL].entry_config(largest.config)
            ),
        }
        per_kernel = {
            kernel: side.measure(kernel, answer.config)
            for kernel, answer in answers.kernels.items()
        }
        per_tuned = {
            kernel: side.measure(kernel, tables[kernel].entry_config(entry.config))
            for kernel, entry in tuned[workload.key].items()
        }
        best_kernel = max(per_tuned, key=lambda kernel: (_gflops(per_tuned[kernel]), kernel))
        confirmed_kernel = confirmed(per_kernel, answers.service.kernel)
        gflops = {name: _gflops(measurement) for name, measurement in measured.items()}
        gflops["tuned"] = _gflops(per_tuned[best_kernel])
        gflops["confirmed"] = _gflops(per_kernel[confirmed_kernel])
        failed = {
            label: _status(measurement)
            for label, measurement in (
                *measured.items(),
                *((f"kernel {kernel}", m) for kernel, m in per_kernel.items()),
                *((f"tuned {kernel}", m) for kernel, m in per_tuned.items()),
            )
            if not measurement.ok
        }
        best = gflops["tuned"] or float("nan")
        rows.append(
            {
                "shape": str(workload),
                "match": answers.service.match,
                "answer_kernel": answers.service.kernel,
                "bundle_match": answers.bundle.match,
                "from": (answers.service.source or {}).get("workload_key"),
                "best_kernel": best_kernel,
                "confirmed_kernel": confirmed_kernel,
                **{f"{name}_gflops": value for name, value in gflops.items()},
                "kernel_gflops": {kernel: _gflops(m) for kernel, m in per_kernel.items()},
                "ratio": gflops["answer"] / best,
                "everywhere_ratio": gflops["everywhere"] / best,
                "confirmed_ratio": gflops["confirmed"] / best,
                "bundle_ratio": gflops["bundle"] / best,
                "nearest_ratio": gflops["nearest"] / best,
                "one_config_ratio": gflops["one_config"] / best,
                "failed": failed,
            }
        )
        print(json.dumps(rows[-1]), flush=True)

    print("\n| held-out shape | service answer (match, kernel) | TFLOP/s "
          "| tuned best TFLOP/s (kernel) | service / best | model everywhere / best "
          "| confirmed / best | bundle / best | nearest / best | one config / best |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(
            f"| {row['shape']} | {row['match']}, {row['answer_kernel']} | "
            f"{row['answer_gflops'] / 1e3:.3g} | "
            f"{row['tuned_gflops'] / 1e3:.3g} ({row['best_kernel']}) | {row['ratio']:.2f} | "
            f"{row['everywhere_ratio']:.2f} | "
            f"{row['confirmed_ratio']:.2f} | {row['bundle_ratio']:.2f} ({row['bundle_match']}) | "
            f"{row['nearest_ratio']:.2f} | {row['one_config_ratio']:.2f} |"
        )
    names = {
        "ratio": "service",
        "everywhere_ratio": "model everywhere",
        "confirmed_ratio": "confirmed",
        "bundle_ratio": "bundle",
        "nearest_ratio": "nearest tuned shape",
        "one_config_ratio": "one config per device",
    }
    medians = ", ".join(
        f"{label} {statistics.median(row[name] for row in rows):.2f}"
        for name, label in names.items()
    )
    print(f"median / tuned best: {medians}")
    args.out.write_text(json.dumps({"device": info.to_dict(), "rows": rows}, indent=2))


def family_tables(
    store: Store, device: StoredDevice, model: ModelAnswers | None = None
) -> list[LookupTable]:
    """Every kernel's table on the device, as the server builds it: the version last tuned there
    and not retired, else the installed kernel's (which answers its default config).
    """
    return [build_table(store, device, name, model=model) for name in kernels_of(FAMILY)]


def table_kernels(
    store: Store, device: StoredDevice, tables: Sequence[LookupTable]
) -> dict[str, KernelSpec]:
    """The kernel version each table answers for, from the database where it was tuned
    there: what the answers are measured with.
    """
    kernels = {}
    for table in tables:
        stored = store.lookup_kernel(device.fingerprint, table.kernel, table.sha256)
        kernels[table.kernel] = (
            load_kernel(table.kernel)
            if stored is None
            else kernel_from_texts(table.kernel, stored.template_source, stored.space_source)
        )
    return kernels


def ask(db: Path, fingerprint: str, group: Sequence[Workload]) -> dict[str, Asked]:
    """The lookup's answers for each shape of ``group``, on a copy of ``db`` without them."""
    with tempfile.TemporaryDirectory() as folder:
        copy = without_workloads(db, Path(folder) / "held_out.db", [w.key for w in group])
        store = Store(f"sqlite:///{copy}")
        device = resolve_device(store, fingerprint)
        model = ModelAnswers()
        tables = family_tables(store, device, model)
        models = [model.model(store, device, table) for table in tables]
        service = [KernelIndex(table, live) for table, live in zip(tables, models, strict=True)]
        everywhere = [
            TrustedEverywhere(table, live) for table, live in zip(tables, models, strict=True)
        ]
        bundle = [KernelIndex(table) for table in tables]
        nearest = [KernelIndex(replace(table, predictions=())) for table in tables]
        asked = {}
        for workload in group:
            query = Query(FAMILY, workload.shape, workload.dtype)
            asked[workload.key] = Asked(
                service=best_answer(service, query),
                everywhere=best_answer(everywhere, query),
                bundle=best_answer(bundle, query),
                nearest=best_answer(nearest, query),
                kernels=kernel_answers(service, query),
            )
        return asked


def confirmed(measured: Mapping[str, Measurement], service_kernel: str) -> str:
    """The kernel the runtime's confirmed policy keeps: the fastest whose answer verified (ties
    to the kernel name), else the service answer's.
    """
    timed = [(median, kernel) for kernel, m in measured.items() if m.ok and (median := m.median_s)]
    return min(timed)[1] if timed else service_kernel


def _status(measurement: Measurement) -> str:
    """A failed measurement's status and the first line of its message."""
    first_line = next(iter(measurement.message.splitlines()), "")
    return f"{measurement.status}: {first_line}" if first_line else str(measurement.status)


def _gflops(measurement: Measurement) -> float:
    return measurement.gflops or 0.0


def _flops(shape: tuple[int, ...]) -> int:
    m, n, k = shape[:3]
    return 2 * m * n * k


if __name__ == "__main__":
    main()
