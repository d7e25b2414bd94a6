"""The first-use confirmation (``runtime.config_sources``): what it runs beside a layer's
answer where nobody tuned the layer's shape (the nearest shapes' configs, the database's cost
model's pick), each candidate built ahead and measured on the device, the fastest verified one
kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from octune.catalogue.family import Workload
from octune.catalogue.registry import KernelSpec, load_kernel
from octune.catalogue.starts import config_starts
from octune.core.results import Measurement, Status
from octune.db.store import Store
from octune.kernels.conv2d import FAMILY as CONV2D
from octune.kernels.gemm import gemm_workload
from octune.runtime.config_sources import (
    LOAD_STRATEGY,
    Choice,
    StoreConfigs,
    build_ahead,
    confirm,
    confirm_candidates,
    fastest,
)
from octune.tuner.device import DeviceInfo
from octune.tuner.programs import SELF_CACHING_PLATFORMS, ProgramCache


def _record(
    store: Store,
    device_info: DeviceInfo,
    kernel: KernelSpec,
    workload: Workload,
    timed: Sequence[tuple[dict[str, int], float]],
) -> None:
    """A completed search session of ``kernel`` at ``workload`` that measured these configs
    in these seconds.
    """
    ids = (
        store.device_id(device_info),
        store.kernel_version_id(kernel.name, kernel.sha256, kernel.source,
                                kernel.space.source_text),
        store.workload_id(workload.problem, workload.key, workload.shape, workload.dtype),
    )  # fmt: skip
    session = store.start_session(*ids, "random", 0, {})
    for config, seconds in timed:
        store.add_measurement(
            session, Measurement(config, Status.OK, (seconds,) * 3, flops=workload.flops)
        )
    store.finish_session(session, "completed")


def test_a_confirmation_also_runs_the_nearest_shapes_configs(
    tmp_path: Path, cl_device, device_info: DeviceInfo
) -> None:
    """At a shape nobody tuned, a database's answer is the nearest tuned shape's config; the
    configs of the next nearest (distinct, legal) are measured beside it, each verified.
    """
    kernel = load_kernel("gemm_panel")
    table = kernel.space.enumerate(device_info.limits)
    first, second = table.config(0), table.config(len(table) - 1)
    with Store(f"sqlite:///{tmp_path / 'near.db'}") as store:
        for size, config in ((64, first), (256, second), (512, first)):
            _record(store, device_info, kernel, gemm_workload(size, size, size), [(config, 1e-3)])
        source = StoreConfigs(store, device_info)
        query = gemm_workload(100, 100, 100)
        assert source.neighbours(kernel, query.shape, "float32", 4) == [first, second]
        assert source.neighbours(kernel, query.shape, "float16", 4) == []  # no such table
        (answer,) = source.answers("gemm_panel", [query.shape])
        chosen = confirm(source, "gemm_panel", query, Choice(kernel, answer.config, answer.match),
                         cl_device)  # fmt: skip
    assert answer.match == "nearest" and answer.config == first
    assert chosen.match == "nearest, timed" and chosen.config in (first, second)
    assert source.predicted(kernel, query.shape, "float32") is None  # 3 measurements: no model


def test_a_confirmation_keeps_what_it_measured_where_the_next_lookup_finds_it(
    tmp_path: Path, cl_device, device_info: DeviceInfo
) -> None:
    """Recorded, a confirmation is a session of ``LOAD_STRATEGY`` with every candidate's
    measurement; the layer's shape is then tuned: the lookup answers it exactly, with the
    confirmation's pick.
    """
    kernel = load_kernel("gemm_panel")
    table = kernel.space.enumerate(device_info.limits)
    first, second = table.config(0), table.config(len(table) - 1)
    query = gemm_workload(100, 100, 100)
    with Store(f"sqlite:///{tmp_path / 'kept.db'}") as store:
        for size, config in ((64, first), (256, second)):
            _record(store, device_info, kernel, gemm_workload(size, size, size), [(config, 1e-3)])
        source = StoreConfigs(store, device_info)
        (answer,) = source.answers("gemm_panel", [query.shape])
        choice = Choice(kernel, answer.config, answer.match)
        chosen = confirm(source, "gemm_panel", query, choice, cl_device, record=store)
        (again,) = StoreConfigs(store, device_info).answers("gemm_panel", [query.shape])
        (session,) = [
            record
            for record in map(store.session_record, range(1, 10))
            if record is not None and record["session"]["strategy"] == LOAD_STRATEGY
        ]
    assert answer.match == "nearest" and chosen.match == "nearest, timed"
    assert again.match == "exact" and again.config == chosen.config
    assert session["session"]["status"] == "completed" and len(session["measurements"]) == 2


def test_a_confirmation_also_runs_the_cost_models_pick_beyond_the_tuned_range(
    tmp_path: Path, cl_device, device_info: DeviceInfo
) -> None:
    """A database that measured enough configs has a cost model; at a shape outside the tuned
    range, where the lookup answers the nearest shape's config, its pick is measured beside it.
    """
    kernel = load_kernel("gemm_panel")
    legal = kernel.space.enumerate(device_info.limits)
    rows = np.random.default_rng(3).choice(len(legal), size=min(12, len(legal)), replace=False)
    measured = [legal.config(int(row)) for row in rows]
    with Store(f"sqlite:///{tmp_path / 'model.db'}") as store:
        for size in (32, 64):  # each config's time grows with its place in the list
            timed = [(config, (1 + index) * size * 1e-6) for index, config in enumerate(measured)]
            _record(store, device_info, kernel, gemm_workload(size, size, size), timed)
        source = StoreConfigs(store, device_info)
        query = gemm_workload(512, 512, 512)
        predicted = source.predicted(kernel, query.shape, "float32")
        (answer,) = source.answers("gemm_panel", [query.shape])
        chosen = confirm(source, "gemm_panel", query, Choice(kernel, answer.config, answer.match),
                         cl_device)  # fmt: skip
        candidates = [answer.config, *source.neighbours(kernel, query.shape, "float32", 4)]
    assert answer.match == "nearest"
    assert predicted in measured and kernel.space.launches(predicted, query.shape_vars(),
                                                            device_info.limits)  # fmt: skip
    assert chosen.match.endswith(", timed") and chosen.config in [*candidates, predicted]


def test_a_confirmation_also_runs_each_kernels_shipped_starts_legal_on_the_device(
    tmp_path: Path, cl_device, device_info: DeviceInfo
) -> None:
    """Given the device, every kernel that takes the layer adds its shipped starts for the
    device's type, those legal under its limits: tiles picked over batches 1 and 16, where a
    database holds one batch's. The GPU starts are asked here under this CPU's limits, which
    leave out a start needing asynchronous copies (NVIDIA's); a start verifies when run.
    """
    gpu = replace(device_info, device_type="gpu")
    shape = {"n": 2, "c": 32, "h": 8, "w": 8, "k": 64, "r": 1, "s": 1, "stride": 1, "pad": 0,
             "dilation": 1, "groups": 1, "nhwc": 0}  # fmt: skip
    workload = CONV2D.workload(shape, "float32")
    with Store(f"sqlite:///{tmp_path / 'starts.db'}") as store:
        source = StoreConfigs(store, device_info)
        (answer,) = source.answers("conv2d", [shape])
        choice = Choice(source.kernel(answer), dict(answer.config), answer.match)
        candidates = confirm_candidates(source, "conv2d", workload, choice, device=gpu)
        without = confirm_candidates(source, "conv2d", workload, choice)
    starts = [c for c in candidates if c.match == "start"]
    pointwise = config_starts(load_kernel("conv2d_1x1"), "gpu")
    assert {c.kernel.name for c in starts} >= {"conv2d_1x1", "conv2d_igemm", "conv2d_direct"}
    assert pointwise[0]["ASYNC"] == 2 and pointwise[0] not in [c.config for c in starts]
    assert [c for c in candidates if c.match != "start"] == without
    chosen = fastest([starts[0]], workload, cl_device)
    assert chosen is not None and chosen.match == "start, timed"


def test_a_confirmation_builds_its_candidates_ahead_in_builder_processes(
    tmp_path: Path, cl_device, device_info: DeviceInfo
) -> None:
    """``build_ahead`` fills the program cache with every candidate in parallel builders, so
    measuring them only loads; a CPU device by default gets no builders (its cores time).
    """
    if cl_device.platform.name.startswith(SELF_CACHING_PLATFORMS):
        pytest.skip(f"{cl_device.platform.name} caches its own builds: nothing to fill")
    kernel = load_kernel("gemm_panel")
    legal = kernel.space.enumerate(device_info.limits)
    configs = [legal.config(row) for row in (0, len(legal) // 2, len(legal) - 1)]
    workload = gemm_workload(64, 64, 64)
    candidates = [Choice(kernel, config, "nearest") for config in configs]
    paths = [
        ProgramCache(tmp_path / "ahead").path(device_info.fingerprint, kernel.source,
                                              kernel.build_options(config, workload))
        for config in configs
    ]  # fmt: skip
    build_ahead([(workload, candidates)], cl_device, ProgramCache(tmp_path / "cpu"))
    assert not (tmp_path / "cpu").exists()
    build_ahead([(workload, candidates)], cl_device, ProgramCache(tmp_path / "ahead"), jobs=2)
    assert all(path.is_file() and path.stat().st_size > 0 for path in paths)
    chosen = fastest(candidates, workload, cl_device, ProgramCache(tmp_path / "ahead"))
    assert chosen is not None and chosen.match == "nearest, timed" and chosen.config in configs


def test_a_confirmations_kernels_share_one_draw_of_the_layers_operands(
    monkeypatch: pytest.MonkeyPatch, cl_device, device_info: DeviceInfo
) -> None:
    """The kernels a confirmation runs on one layer bind the same inputs and float64
    reference, drawn once (a batch-16 layer's draw took 1.3 s on the H200's host), and each
    still verifies against it.
    """
    import octune.kernels.conv2d as conv2d

    calls: list[tuple[int, ...]] = []
    real = conv2d.conv2d_reference

    def counted(x: np.ndarray, *rest: object, **options: object) -> np.ndarray:
        calls.append(x.shape)
        return real(x, *rest, **options)

    monkeypatch.setattr(conv2d, "conv2d_reference", counted)
    shape = {"n": 2, "c": 16, "h": 8, "w": 8, "k": 16, "r": 1, "s": 1, "stride": 1, "pad": 0,
             "dilation": 1, "groups": 1, "nhwc": 0}  # fmt: skip
    workload = CONV2D.workload(shape, "float32")
    candidates = []
    for name in ("conv2d_igemm", "conv2d_1x1", "conv2d_direct"):
        kernel = load_kernel(name)
        config = kernel.space.enumerate(device_info.limits).config(0)
        candidates.append(Choice(kernel, config, "nearest"))
    chosen = fastest(candidates, workload, cl_device)
    assert chosen is not None and chosen.match == "nearest, timed"
    assert len(calls) == 2  # the reference and its magnitudes' bound, for all three kernels
