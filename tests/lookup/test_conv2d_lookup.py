"""conv2d through the family-generic lookup: a layer's answer is the fastest (kernel, config)
stored for it, as cuDNN's find answers an algorithm; the service's path, json and sqlite
bundles and the C header's ``octune_conv2d_lookup`` agree on random layers in both layouts,
tuned or not. Databases and bundles from before the layout key answer NCHW only.
"""

from __future__ import annotations

import random
import re
import subprocess
from dataclasses import replace

import pytest
from helpers.c_lookup import compile_query, python_line
from helpers.lookup_testing import DEVICE

from octune.catalogue.registry import kernels_of, load_kernel
from octune.core.errors import WorkloadError
from octune.core.problem import kernel_version_sha256
from octune.core.results import Measurement, Status
from octune.db.store import Store
from octune.firmware.bundle import write_bundle
from octune.firmware.bundle_load import load_bundle
from octune.kernels.conv2d import FAMILY
from octune.lookup.data import Answer, LookupTable, Query, QueryError
from octune.lookup.predictor import train
from octune.lookup.semantics import KernelIndex, best_answer
from octune.lookup.tables import StoreLookup, build_table, resolve_device

KEYS = FAMILY.problem.keys


def random_layer(rng: random.Random) -> dict[str, int]:
    """A layer the tuner accepts: networks' shapes and odd ones, depthwise and pointwise."""
    while True:
        c = rng.choice([3, 16, 32, 64, 96, 128, 256, 512, 1024, 7])
        kind = rng.random()
        rs = 1 if kind < 0.35 else rng.choice([3, 3, 5, 7])
        groups = c if 0.35 <= kind < 0.6 else 1
        shape = {
            "n": rng.choice([1, 1, 1, 2, 8]), "c": c, "h": rng.choice([7, 14, 28, 56, 112, 13]),
            "k": c if groups > 1 else rng.choice([16, 64, 128, 256, 1000]), "r": rs, "s": rs,
            "stride": rng.choice([1, 1, 2]), "pad": rs // 2 if rng.random() < 0.8 else 0,
            "dilation": 1 if rng.random() < 0.9 else 2, "groups": groups,
            "nhwc": rng.choice([0, 1]),
        }  # fmt: skip
        shape["w"] = shape["h"] if rng.random() < 0.8 else shape["h"] + 3
        try:
            FAMILY.workload(shape)
        except WorkloadError:
            continue
        return shape


@pytest.fixture(scope="module")
def conv_store(tmp_path_factory):
    """Every conv2d kernel measured on the random layers it takes, two or three configs each,
    times drawn so that different kernels win different layers.
    """
    path = tmp_path_factory.mktemp("conv") / "conv.db"
    rng = random.Random(5)
    tuned: list[dict[str, int]] = []
    with Store(f"sqlite:///{path}") as store:
        device_id = store.device_id(DEVICE)
        for name in kernels_of("conv2d"):
            kernel = load_kernel(name)
            table = kernel.space.enumerate(DEVICE.limits)
            configs = [table.config(rng.randrange(len(table))) for _ in range(8)]
            kernel_id = store.kernel_version_id(
                name, kernel.sha256, kernel.source, kernel.space.source_text
            )
            for shape in [random_layer(rng) for _ in range(60)]:
                workload = FAMILY.workload(shape)
                if kernel.takes(workload) is not None:
                    continue
                tuned.append(workload.shape)
                workload_id = store.workload_id("conv2d", workload.key, workload.shape, "float32")
                session = store.start_session(device_id, kernel_id, workload_id, "random", 0, {})
                for chosen in rng.sample(configs, 3):
                    seconds = workload.flops / (rng.uniform(1, 100) * 1e9)
                    store.add_measurement(
                        session, Measurement(chosen, Status.OK, (seconds,) * 3, workload.flops)
                    )
                store.finish_session(session, "completed")
        yield store, tuned


def queries(tuned: list[dict[str, int]], count: int, seed: int) -> list[Query]:
    """Tuned layers, their neighbours, and any layer the tuner accepts."""
    rng = random.Random(seed)
    found: list[Query] = []
    while len(found) < count:
        if rng.random() < 0.3:
            shape = rng.choice(tuned)
        elif rng.random() < 0.5:
            shape = {**rng.choice(tuned), "h": rng.choice([9, 30, 200]), "n": rng.choice([1, 3])}
            shape["nhwc"] = rng.choice([shape["nhwc"], 1 - shape["nhwc"]])
        else:
            shape = random_layer(rng)
        try:
            FAMILY.workload(shape)
        except WorkloadError:
            continue
        found.append(Query("conv2d", shape, "float32"))
    return found


def answer_or_none(lookup, query: Query) -> Answer | None:
    try:
        return lookup(query)
    except QueryError:
        return None


def test_a_layer_is_answered_by_its_fastest_kernel_in_service_bundles_and_c(conv_store, tmp_path):
    conv_store, tuned = conv_store
    device = resolve_device(conv_store, "example")
    tables = [build_table(conv_store, device, name) for name in kernels_of("conv2d")]
    indexes = [KernelIndex(table) for table in tables]
    service = StoreLookup(conv_store)
    sources = {}
    for table in tables:
        kernel = load_kernel(table.kernel)
        sources[table.sha256] = (kernel.source, kernel.space.source_text)
    bundles = {}
    for fmt in ("json", "sqlite", "c-header"):
        write_bundle(
            tmp_path / fmt,
            fmt,
            {"name": "example-cpu", "fingerprint": DEVICE.fingerprint},
            tables,
            sources,
        )
    for fmt in ("json", "sqlite"):
        bundles[fmt] = load_bundle(tmp_path / fmt)
    program = compile_query(tmp_path / "c-header")

    cases = queries(tuned, 300, seed=1)
    expected = [answer_or_none(lambda q: best_answer(indexes, q), q) for q in cases]
    winners = {a.kernel for a in expected if a is not None and a.match == "exact"}
    assert len(winners) >= 3, winners  # different algorithms win different layers
    for query, answer in zip(cases, expected, strict=True):  # in the layer's own layout
        assert answer is not None and answer.defines["NHWC"] == query.shape["nhwc"]
        assert answer.kernel.endswith("_nhwc") == bool(query.shape["nhwc"]), answer.kernel
    for query, want in zip(cases, expected, strict=True):
        got = answer_or_none(lambda q: service.lookup(device, q), query)
        assert python_line(got) == python_line(want), query.shape
        for fmt, bundle in bundles.items():
            assert python_line(answer_or_none(bundle.lookup, query)) == python_line(want), fmt
    stdin = "".join("conv2d " + " ".join(str(q.shape[key]) for key in KEYS) + "\n" for q in cases)
    result = subprocess.run([program], input=stdin, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    for query, want, got in zip(cases, expected, result.stdout.splitlines(), strict=True):
        assert got == python_line(want), query.shape


def test_an_exact_answer_is_the_fastest_measurement_of_any_kernel(conv_store):
    conv_store, tuned = conv_store
    device = resolve_device(conv_store, "example")
    service = StoreLookup(conv_store)
    for shape in tuned[:20]:
        workload = FAMILY.workload(shape)
        answer = service.lookup(device, Query("conv2d", shape, "float32"))
        fastest = min(
            best.median_s
            for name in kernels_of("conv2d")
            if (kernel := load_kernel(name))
            and (best := conv_store.best(DEVICE.fingerprint, name, workload.key, kernel.sha256))
        )
        assert answer.match == "exact"
        assert answer.time_s == pytest.approx(fastest)


# --- from before the layout key ----------------------------------------------------------------


def legacy_direct() -> tuple[str, str]:
    """conv2d_direct's template and space as they were before conv2d had ``nhwc``: neither names
    NHWC (the space had no ``requires:``).
    """
    kernel = load_kernel("conv2d_direct")
    space = kernel.space.source_text.replace("requires:\n  - NHWC == 0\n\n", "")
    assert not re.search(r"\bNHWC\b", kernel.source + space)
    return kernel.source, space


@pytest.fixture(scope="module")
def legacy_store(tmp_path_factory):
    """A database tuned before conv2d had a layout key: workloads stored without ``nhwc`` in
    their shape and key, measured with the legacy conv2d_direct.
    """
    path = tmp_path_factory.mktemp("legacy") / "legacy.db"
    rng = random.Random(7)
    template, space = legacy_direct()
    table = load_kernel("conv2d_direct").space.enumerate(DEVICE.limits)  # same parameters
    layers: dict[str, dict[str, int]] = {}
    with Store(f"sqlite:///{path}") as store:
        device_id = store.device_id(DEVICE)
        kernel_id = store.kernel_version_id(
            "conv2d_direct", kernel_version_sha256(template, space), template, space
        )
        while len(layers) < 12:
            shape = {k: v for k, v in random_layer(rng).items() if k != "nhwc"}
            key = "conv2d:" + ",".join(f"{k}={v}" for k, v in shape.items()) + ",dtype=float32"
            layers[key] = shape
            workload_id = store.workload_id("conv2d", key, shape, "float32")
            session = store.start_session(device_id, kernel_id, workload_id, "random", 0, {})
            flops = FAMILY.workload(shape).flops
            config = table.config(rng.randrange(len(table)))
            store.add_measurement(session, Measurement(config, Status.OK, (1e-3,) * 3, flops))
            store.finish_session(session, "completed")
        yield store, list(layers.values())


def test_a_database_from_before_the_layout_key_answers_nchw_only(legacy_store, tmp_path):
    """Its rows read as NCHW (the key's default) in the service, bundles and C header, and the
    legacy kernel version, which never reads NHWC, does not answer an NHWC layer.
    """
    store, layers = legacy_store
    device = resolve_device(store, "example")
    table = build_table(store, device, "conv2d_direct")
    assert len(table.tuned) == len(layers)
    assert {entry.shape[KEYS.index("nhwc")] for entry in table.tuned} == {0}
    assert train(store, device, table) is None  # it reads the old rows too: too few to train
    template, space = legacy_direct()
    device_record = {"name": "example-cpu", "fingerprint": DEVICE.fingerprint}
    for fmt in ("json", "sqlite", "c-header"):
        write_bundle(tmp_path / fmt, fmt, device_record, [table], {table.sha256: (template, space)})
    service = StoreLookup(store)
    lookups = {
        "service": lambda q: service.lookup(device, q),
        **{fmt: load_bundle(tmp_path / fmt).lookup for fmt in ("json", "sqlite")},
    }
    for shape in layers:
        for nchw in (shape, {**shape, "nhwc": 0}):
            for name, lookup in lookups.items():
                assert lookup(Query("conv2d_direct", nchw)).match == "exact", name
        for lookup in lookups.values():
            with pytest.raises(QueryError, match="needs NHWC == 0"):
                lookup(Query("conv2d_direct", {**shape, "nhwc": 1}))
        assert service.lookup(device, Query("conv2d", shape)).kernel == "conv2d_direct"
        nhwc = service.lookup(device, Query("conv2d", {**shape, "nhwc": 1}))
        assert nhwc.kernel.endswith("_nhwc")
    program = compile_query(tmp_path / "c-header")
    stdin = "".join(
        "conv2d " + " ".join(str({**shape, "nhwc": nhwc}[key]) for key in KEYS) + "\n"
        for shape in layers
        for nhwc in (0, 1)
    )
    result = subprocess.run([program], input=stdin, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["exact", "none"] * len(layers)


def before_the_layout_key(table: LookupTable) -> LookupTable:
    """``table`` as octune wrote it before conv2d had ``nhwc``: no such key, NCHW entries."""
    problem = table.problem
    at = problem.keys.index("nhwc")
    old = replace(
        problem,
        flags=tuple(f for f in problem.flags if f != "nhwc"),
        ranges=problem.ranges[:at] + problem.ranges[at + 1 :],
        shape_vars={var: key for var, key in problem.shape_vars.items() if key != "nhwc"},
        flag_defines={var: key for var, key in problem.flag_defines.items() if key != "nhwc"},
        defaults=tuple(d for d in problem.defaults if d[0] != "nhwc"),
    )
    tuned = tuple(
        replace(e, shape=e.shape[:at] + e.shape[at + 1 :]) for e in table.tuned if not e.shape[at]
    )
    requires = tuple(r for r in table.requires if "NHWC" not in r)
    return replace(table, problem=old, tuned=tuned, requires=requires)


def test_a_bundle_from_before_the_layout_key_answers_its_layers(legacy_store, tmp_path):
    """A bundle carries its problem: one without ``nhwc`` answers its (NCHW) layers as the
    database does, and a query naming the key is refused in one line.
    """
    store, layers = legacy_store
    table = build_table(store, resolve_device(store, "example"), "conv2d_direct")
    write_bundle(tmp_path, "json", {"name": "example-cpu", "fingerprint": DEVICE.fingerprint},
                 [before_the_layout_key(table)], {table.sha256: legacy_direct()})  # fmt: skip
    bundle = load_bundle(tmp_path)
    index = KernelIndex(table)
    for shape in layers:
        old = bundle.lookup(Query("conv2d_direct", shape))
        new = index.lookup(Query("conv2d_direct", shape))
        assert (old.match, old.config, old.time_s) == ("exact", new.config, new.time_s)
        with pytest.raises(QueryError, match="unknown: nhwc"):
            bundle.lookup(Query("conv2d_direct", {**shape, "nhwc": 1}))
