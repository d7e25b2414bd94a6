"""conv2d through the family-generic lookup: a layer's answer is the fastest (kernel, config)
stored for it, as cuDNN's find answers an algorithm; the service's path, json and sqlite
bundles and the C header's ``octune_conv2d_lookup`` agree on random layers, tuned or not.
"""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest
from test_bundle import GCC, python_line
from test_lookup import DEVICE

from octune.db.store import Store
from octune.firmware.bundle import load_bundle, write_bundle
from octune.kernels.conv2d import FAMILY
from octune.lookup.semantics import Answer, KernelIndex, Query, QueryError, best_answer
from octune.lookup.tables import StoreLookup, build_table, resolve_device
from octune.tuner.errors import WorkloadError
from octune.tuner.kernels import kernels_of, load_kernel
from octune.tuner.results import Measurement, Status

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
    program = compile_conv_program(tmp_path / "c-header")

    cases = queries(tuned, 300, seed=1)
    expected = [answer_or_none(lambda q: best_answer(indexes, q), q) for q in cases]
    winners = {a.kernel for a in expected if a is not None and a.match == "exact"}
    assert len(winners) >= 3, winners  # different algorithms win different layers
    for query, want in zip(cases, expected, strict=True):
        got = answer_or_none(lambda q: service.lookup(device, q), query)
        assert python_line(got) == python_line(want), query.shape
        for fmt, bundle in bundles.items():
            assert python_line(answer_or_none(bundle.lookup, query)) == python_line(want), fmt
    stdin = "".join(" ".join(str(q.shape[key]) for key in KEYS) + "\n" for q in cases)
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


C_PROGRAM = r"""
#include <stdio.h>
#include "octune_lookup.h"

int main(void) {
    long q[%(nkeys)d];
    int match, d;
    char options[4096];
    struct octune_config cfg;
    while (scanf("%(scan)s", %(refs)s) == %(nkeys)d) {
        match = octune_conv2d_lookup(%(args)s, &cfg);
        if (match < 0) { printf("none\n"); continue; }
        printf("%%s", octune_match_names[match]);
        for (d = 0; d < cfg.ndefines; d++)
            printf(" %%s=%%d", cfg.define_names[d], cfg.defines[d]);
        printf(" |");
        for (d = 0; d < (int)cfg.work_dim; d++)
            printf(" %%zu/%%zu", cfg.global_size[d], cfg.local_size[d]);
        printf(" | %%.17g %%.17g |", cfg.time_s, cfg.gflops);
        if (cfg.source_index < 0) printf(" -");
        else for (d = 0; d < %(nkeys)d; d++) printf(" %%lld", (long long)cfg.source_shape[d]);
        octune_build_options(&cfg, options, sizeof options);
        printf(" | %%s | %%s %%s %%s\n", options, cfg.kernel, cfg.entry, cfg.kernel_sha256);
    }
    return 0;
}
"""


def compile_conv_program(header_dir: Path) -> Path:
    n = len(KEYS)
    source = C_PROGRAM % {
        "nkeys": n,
        "scan": " ".join(["%ld"] * n),
        "refs": ", ".join(f"&q[{i}]" for i in range(n)),
        "args": ", ".join(f"q[{i}]" for i in range(n)),
    }
    (header_dir / "main.c").write_text(source)
    subprocess.run([*GCC, "-I", str(header_dir), "-o", str(header_dir / "lookup"),
                    str(header_dir / "main.c")], check=True, capture_output=True, text=True,
                   timeout=120)  # fmt: skip
    return header_dir / "lookup"
