"""The lookup semantics shared by the config service and the offline bundles: exact, nearest
legal, predicted, default; answered from real SQLite stores through the Store API.
"""

from __future__ import annotations

import random
import re
import subprocess
import sys
from dataclasses import replace

import pytest
from helpers.lookup_testing import DEVICE, config

from octune.catalogue.family import Workload
from octune.catalogue.registry import load_kernel
from octune.catalogue.space import SearchSpace
from octune.core.errors import SpaceError
from octune.core.results import Measurement, Status
from octune.db.store import Store
from octune.kernels.gemm import gemm_query, gemm_workload
from octune.lookup.data import Entry, LookupTable, Prediction, QueryError, TableError
from octune.lookup.neighbours import LAYOUT_WEIGHT, log2_fixed
from octune.lookup.semantics import KernelIndex
from octune.lookup.tables import StoreLookup, build_table, default_config, resolve_device


def record(store: Store, workload: Workload, measured: dict[str, float]) -> None:
    """One tuning session's rows for ``workload``: {MWG value: median seconds}, one failure."""
    kernel = load_kernel("gemm")
    ids = (
        store.device_id(DEVICE),
        store.kernel_version_id(
            kernel.name, kernel.sha256, kernel.source, kernel.space.source_text
        ),
        store.workload_id(workload.problem, workload.key, workload.shape, workload.dtype),
    )
    session = store.start_session(*ids, "random", 0, {})
    for mwg, seconds in measured.items():
        store.add_measurement(
            session,
            Measurement(config(MWG=int(mwg)), Status.OK, (seconds,) * 3, flops=workload.flops),
        )
    store.add_measurement(session, Measurement(config(MWG=128), Status.WRONG_RESULT, (1e-9,)))
    store.finish_session(session, "completed")


@pytest.fixture
def store(tmp_path):
    with Store(f"sqlite:///{tmp_path / 'lookup.db'}") as store:
        record(store, gemm_workload(256, 256, 256), {16: 0.004, 32: 0.002, 64: 0.003})
        record(store, gemm_workload(256, 256, 256, transa=True), {64: 0.001})
        record(store, gemm_workload(4096, 64, 64), {128: 0.01})
        # MWG=256 with MDIMC=4 needs 256 accumulators: illegal in the space, never served.
        record(store, gemm_workload(8, 8, 8), {256: 0.01})
        yield store


def test_exact_nearest_and_answer_fields(store):
    lookup = StoreLookup(store)
    device = lookup.device("example")
    exact = lookup.lookup(device, gemm_query(256, 256, 256))
    assert exact.match == "exact"
    assert exact.config["MWG"] == 32  # the fastest passing row; the faster wrong one is ignored
    assert exact.time_s == pytest.approx(0.002)
    assert exact.gflops == pytest.approx(2 * 256**3 / 0.002 / 1e9)
    assert exact.kernel_sha256 == load_kernel("gemm").sha256
    assert exact.device_fingerprint == DEVICE.fingerprint
    assert exact.defines["TRANSA"] == 0 and exact.defines["MWG"] == 32
    assert exact.build_options.startswith("-DTRANSA=0 -DTRANSB=0 -DMWG=32 ")
    assert exact.local_size == (4, 4, exact.config["KDIMC"])
    assert exact.global_size == (256 // 16 * 4, 256 // 32 * 4, exact.config["KDIMC"])

    # 300x250x200 is nearest to 256^3 with the same transposes.
    near = lookup.lookup(device, gemm_query(300, 250, 200))
    assert near.match == "nearest" and near.config["MWG"] == 32
    assert near.source["shape"] == {"m": 256, "n": 256, "k": 256, "transa": 0, "transb": 0}
    assert near.global_size == (-(-250 // 16) * 4, -(-300 // 32) * 4, near.config["KDIMC"])
    assert near.time_s == pytest.approx(2 * 300 * 250 * 200 / (near.gflops * 1e9))

    # TN answers from the TN workload; TT is one transpose from TN and two from NN.
    assert lookup.lookup(device, gemm_query(256, 256, 256, transa=True)).config["MWG"] == 64
    tt = lookup.lookup(device, gemm_query(256, 256, 256, transa=True, transb=True))
    assert tt.match == "nearest" and tt.source["shape"]["transa"] == 1
    assert tt.defines["TRANSA"] == 1 and tt.defines["TRANSB"] == 1

    # Far away in size, a same-layout workload loses to the exact size in another layout.
    far = lookup.lookup(device, gemm_query(4096, 64, 64, transb=True))
    assert far.source["shape"]["m"] == 4096

    assert lookup.lookup(device, gemm_query(8, 8, 8)).match == "nearest"


def test_untuned_kernel_version_answers_default(tmp_path):
    with Store(f"sqlite:///{tmp_path / 'empty.db'}") as empty:
        empty.device_id(DEVICE)
        lookup = StoreLookup(empty)
        device = lookup.device(DEVICE.fingerprint)
        answer = lookup.lookup(device, gemm_query(100, 100, 100), load_kernel("gemm").sha256)
    assert answer.match == "default"
    assert answer.config == config()
    assert answer.time_s is None and answer.gflops is None and answer.source is None


def test_an_untuned_family_answers_with_the_kernel_written_for_the_device(tmp_path):
    """Of equal answers (an untuned device's defaults) the kernel whose space lists the
    device's type wins: a CPU gets gemm_panel, not gemm.cl's GPU tiles (a twentieth of its rate
    under PoCL); a GPU gets a kernel written for any device.
    """
    gpu = replace(DEVICE, name="example-gpu", device_type="gpu")
    with Store(f"sqlite:///{tmp_path / 'empty.db'}") as empty:
        lookup = StoreLookup(empty)
        answers = {}
        for info in (DEVICE, gpu):
            empty.device_id(info)
            device = lookup.device(info.fingerprint)
            answers[info.device_type] = lookup.lookup(device, gemm_query(100, 100, 100)).kernel
    assert answers == {"cpu": "gemm_panel", "gpu": "gemm"}


def test_new_measurements_rebuild_the_cached_table(store):
    lookup = StoreLookup(store, check_every_s=0.0)
    device = lookup.device(DEVICE.fingerprint)
    assert lookup.lookup(device, gemm_query(512, 512, 512)).match == "nearest"
    record(store, gemm_workload(512, 512, 512), {16: 0.5})
    assert lookup.lookup(device, gemm_query(512, 512, 512)).match == "exact"


def test_a_live_model_answers_first_and_a_grid_of_answers_only_beyond_near_neighbours(store):
    device = resolve_device(store, DEVICE.fingerprint)
    table = build_table(store, device, "gemm")
    empty = replace(table, tuned=())
    model_config = tuple(config(MWG=64, NWG=64).values())

    def model(_table: LookupTable, query) -> Prediction:
        return Prediction(model_config, 0.5, 10.0)

    # A live model scores the query's own shape: it answers before the tuned neighbour ...
    live = KernelIndex(table, model).lookup(gemm_query(300, 200, 200))
    assert live.match == "predicted" and live.config["MWG"] == 64
    assert (live.time_s, live.gflops) == (0.5, 10.0)
    assert KernelIndex(table).lookup(gemm_query(300, 200, 200)).match == "nearest"
    # ... inside the range of the tuned shapes (M 256-4096, N and K 64-256) only.
    index = KernelIndex(table, model)
    assert index.inside((4096, 64, 256, 1, 1), "float32")
    assert not index.inside((300, 300, 300, 0, 0), "float32")
    assert not index.inside((300, 200, 200, 0, 0), "float16")  # nothing of it tuned
    for outside in [(300, 300, 300), (128, 100, 100), (300, 200, 32), (8192, 64, 64)]:
        assert index.lookup(gemm_query(*outside)).match == "nearest", outside

    # A bundle's table of model answers: the nearest grid point answers, but only where no
    # tuned neighbour is within NEAR_OCTAVES.
    grid = tuple(
        Entry((size, size, size, 0, 0), "float32", tuple(config(MWG=mwg).values()), 1.0, 0.0,
              float(size), f"grid-{size}")
        for size, mwg in ((64, 16), (1024, 128))
    )  # fmt: skip
    near = KernelIndex(replace(table, predictions=grid)).lookup(gemm_query(300, 300, 300))
    assert near.match == "nearest"
    from_table = KernelIndex(replace(empty, predictions=grid)).lookup(gemm_query(900, 900, 900))
    assert from_table.match == "predicted" and from_table.config["MWG"] == 128
    assert from_table.gflops == 1024.0
    assert KernelIndex(empty).lookup(gemm_query(300, 300, 300)).match == "default"


def test_nearest_skips_configs_whose_launch_is_illegal_for_the_query():
    # Global size N with local size X: N=250 cannot launch X=3 (250 % 3), so the nearer
    # workload is skipped and the further one, whose X=2 divides 250, answers.
    near = Entry((256, 256, 256, 0, 0), "float32", (3,), 1.0, 0.0, 1.0, "near")
    far = Entry((1024, 1024, 1024, 0, 0), "float32", (2,), 1.0, 0.0, 1.0, "far")
    table = replace(_toy_table([near, far]), launch_global=("N",), launch_local=("X",))
    assert KernelIndex(table).lookup(gemm_query(256, 249, 256)).source["workload_key"] == "near"
    answer = KernelIndex(table).lookup(gemm_query(256, 250, 256))
    assert answer.match == "nearest" and answer.source["workload_key"] == "far"
    assert answer.global_size == (250,) and answer.local_size == (2,)


def test_neighbours_are_the_nearest_shapes_distinct_legal_configs():
    """Nearest first, each config once, none whose launch is illegal for the query (X=3 with
    N=250), no more than asked: what a first-use confirmation measures beside the answer.
    """
    sizes_and_x = ((256, 2), (512, 3), (1024, 2), (2048, 5), (4096, 10), (64, 1))
    table = replace(
        _toy_table([Entry((m, 250, 256, 0, 0), "float32", (x,), 1.0, 0.0, 1.0, f"m{m}")
                    for m, x in sizes_and_x]),
        launch_global=("N",), launch_local=("X",),
    )  # fmt: skip
    index = KernelIndex(table)
    query = gemm_query(300, 250, 256)
    # m=256; 512 (X=3) illegal; 1024 the same config as 256; then 64, 2048, 4096.
    assert index.neighbours(query, 3) == [(2,), (1,), (5,)]
    assert index.neighbours(query, 10) == [(2,), (1,), (5,), (10,)]
    assert index.neighbours(query, 1) == [tuple(index.lookup(query).config.values())]


@pytest.mark.parametrize(
    ("query", "fragment"),
    [
        (gemm_query(0, 4, 4), "m=0 is out of range"),
        (gemm_query(4, 4, 1 << 21), "out of range"),
        (gemm_query(4, 4, 4, dtype="float16"), "computes float32, not float16"),
        (gemm_query(4, 4, 4, dtype="bfloat16"), "supports dtype float32, float16, int8"),
        (replace(gemm_query(4, 4, 4), shape={"m": 4, "n": 4}), "missing: k"),
        (replace(gemm_query(4, 4, 4), shape={**gemm_query(4, 4, 4).shape, "x": 1}), "unknown: x"),
        (replace(gemm_query(4, 4, 4), shape={**gemm_query(4, 4, 4).shape, "m": 4.0}), "integer"),
        (
            replace(gemm_query(4, 4, 4), shape={**gemm_query(4, 4, 4).shape, "transa": 2}),
            "use 0..1",
        ),
        (replace(gemm_query(4, 4, 4), kernel="conv"), "not 'conv'"),
        (gemm_query(1 << 20, 1 << 20, 64), "M \\* N = 1099511627776 elements"),
        (gemm_query(3000, 5, 1 << 20), "beyond 32-bit indexing"),
    ],
)
def test_bad_queries_are_one_line_errors(store, query, fragment):
    index = StoreLookup(store).index(resolve_device(store, "example"), "gemm")
    with pytest.raises(QueryError, match=fragment) as raised:
        index.lookup(query)
    assert "\n" not in str(raised.value)


def test_unknown_device_and_kernel_are_one_line_errors(store):
    with pytest.raises(QueryError, match=r"no device 'nvidia'.*example-cpu"):
        resolve_device(store, "nvidia")
    with pytest.raises(Exception, match="did you mean 'gemm'"):
        build_table(store, resolve_device(store, "example"), "gemmm")


@pytest.mark.parametrize(
    ("text", "piece"),
    [
        ("__import__('os').system('true')", "call to '__import__('os').system'"),
        ("N.real", "attribute access 'N.real'"),
        ("N / 2", "must be an integer"),
        ("pow(N, 2)", "call to 'pow'"),
        ("N ** N", "exponent in 'N ** N'"),
        ("'a'", "string 'a'"),
        ("X + 1", "uses 'X', which is not one of its names"),
    ],
)
def test_launch_expressions_are_vetted_not_evaluated(store, text, piece):
    table = build_table(store, resolve_device(store, "example"), "gemm")
    with pytest.raises(TableError, match=re.escape(piece)):
        KernelIndex(replace(table, launch_global=(text, *table.launch_global[1:])))


def test_launch_expressions_take_the_whole_integer_language(store):
    """What a space may write (conditionals, and/or values, powers) the lookup computes."""
    device = resolve_device(store, "example")
    table = build_table(store, device, "gemm")
    written = ("N ** 1 if N > 0 and TRANSA == 0 else 0 or N", *table.launch_global[1:])
    index = KernelIndex(replace(table, launch_global=written))
    launch = index.launch(table.default_config, (256, 256, 256, 0, 0))
    assert launch is not None and launch.global_size[0] == 256


def test_tree_search_matches_a_linear_scan():
    """The k-d tree must pick exactly what the C header's linear scan picks, ties included."""
    rng = random.Random(5)
    sizes = [rng.choice([1, 7, 64, 100, 128, 129, 1000, 4096, 1 << 20]) for _ in range(600)]
    shapes = sorted(
        {(rng.choice(sizes), rng.choice(sizes), rng.choice(sizes), rng.randint(0, 1), 0)
         for _ in range(300)}
    )  # fmt: skip
    entries = [
        Entry(shape, "float32", (i,), 1.0, 0.0, 1.0, str(i)) for i, shape in enumerate(shapes)
    ]
    table = _toy_table(entries)
    index = KernelIndex(table)
    for _ in range(300):
        q = (*(rng.randint(1, 5000) for _ in range(3)), rng.randint(0, 1), rng.randint(0, 1))
        answer = index.lookup(gemm_query(*q[:3], transa=bool(q[3]), transb=bool(q[4])))

        def distance(shape: tuple[int, ...], q=q) -> int:
            logs = sum(
                (log2_fixed(a) - log2_fixed(b)) ** 2 for a, b in zip(shape[:3], q[:3], strict=True)
            )
            return logs + sum(
                ((a - b) * LAYOUT_WEIGHT) ** 2 for a, b in zip(shape[3:], q[3:], strict=True)
            )

        best = min(range(len(table.tuned)), key=lambda i: (distance(table.tuned[i].shape), i))
        assert answer.source["workload_key"] == table.tuned[best].workload_key


def _toy_table(entries: list[Entry]) -> LookupTable:
    from octune.lookup.tables import problem_spec

    return LookupTable(
        kernel="gemm", sha256="0" * 64, entry="gemm", device_fingerprint="f" * 16,
        problem=problem_spec("gemm"), parameters=("X",), launch_global=("M",),
        launch_local=("1",), limits={}, default_config=(1,), extra_build_options=(),
        tuned=tuple(entries),
    )  # fmt: skip


def test_lookup_module_needs_only_the_standard_library():
    code = (
        "import sys; "
        "import octune.lookup.semantics, octune.firmware.bundle, octune.firmware.cheader; "
        "third = {m.split('.')[0] for m in sys.modules} & "
        "{'numpy', 'pyopencl', 'sqlalchemy', 'yaml', 'pydantic', 'typer', 'rich', 'jinja2'}; "
        "assert not third, third"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_retired_kernel_versions_are_never_answered(tmp_path):
    """A database tuned with a version that its successor's space retires (one-launch split-K
    before its device-scope fence) answers the version in service, never the retired one.
    """
    kernel = load_kernel("gemm_splitk_serial")
    retired = sorted(kernel.space.retired)[0]
    workload = gemm_workload(64, 64, 4096)
    space = kernel.space
    legal = dict(zip(space.parameter_names, default_config(space, DEVICE.limits), strict=True))
    with Store(f"sqlite:///{tmp_path / 'retired.db'}") as store:
        device_id = store.device_id(DEVICE)
        workload_id = store.workload_id(workload.problem, workload.key, workload.shape, "float32")

        def tune(sha256: str, seconds: float) -> None:
            # The retired version's own texts are not at hand: only its hash matters here.
            version = store.kernel_version_id(kernel.name, sha256, kernel.source, space.source_text)
            session = store.start_session(device_id, version, workload_id, "random", 0, {})
            measured = Measurement(legal, Status.OK, (seconds,) * 3, flops=workload.flops)
            store.add_measurement(session, measured)
            store.finish_session(session, "completed")

        tune(retired, 1e-5)
        lookup = StoreLookup(store)
        query = gemm_query(64, 64, 4096)
        device = lookup.device(DEVICE.fingerprint)
        answer = lookup.lookup(device, replace(query, kernel=kernel.name))
        assert (answer.match, answer.kernel_sha256) == ("default", kernel.sha256)
        assert lookup.lookup(device, query).kernel_sha256 != retired  # the family's answer too
        with pytest.raises(QueryError, match=rf"version {retired[:12]} is retired \(one-launch"):
            lookup.lookup(device, replace(query, kernel=kernel.name), kernel_sha256=retired)

        tune(kernel.sha256, 2e-5)  # tuned again, slower: still the answer
        lookup = StoreLookup(store)
        answer = lookup.lookup(device, replace(query, kernel=kernel.name))
        assert (answer.match, answer.kernel_sha256) == ("exact", kernel.sha256)
        assert answer.time_s == pytest.approx(2e-5)


def test_the_default_of_a_space_that_rejects_nearly_everything_is_refused_in_bounded_time():
    """Issue 45: 12 parameters of 40 values and one sum rule that only the last ones can break
    (4e19 combinations, under enumeration's bound) held every lookup for hours.
    """
    names = [f"P{i}" for i in range(12)]
    text = "\n".join([
        "kernel: gemm", "problem: gemm", "entry: gemm_kernel", "parameters:",
        *(f"  {name}: {{values: [{', '.join(map(str, range(1, 41)))}]}}" for name in names),
        "constraints:", f"  - {' + '.join(names)} > 1000",
        "launch:", "  local: [1, 1]", "  global: [M, N]",
    ])  # fmt: skip
    space = SearchSpace.from_yaml(text, "upload.yaml", ("M", "N", "K"))
    with pytest.raises(SpaceError, match="no legal config among the first 20000 partial ones"):
        default_config(space, DEVICE.limits)
