"""Firmware bundles: export from a real database, offline lookups identical to the service's,
the C header compiled with gcc and compared on random queries, idempotent import, and the
integrity checks that refuse damaged bundles.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from helpers.c_lookup import GCC, compile_header, python_line
from helpers.cli_testing import assert_one_line_error, octune
from helpers.lookup_testing import DEVICE, config, random_queries

from octune.catalogue.limits import max_buffer_bytes
from octune.catalogue.registry import load_kernel
from octune.core.errors import SpaceError
from octune.db.store import Store
from octune.firmware.bundle import MANIFEST, SCHEMA_VERSION, BundleError, write_bundle
from octune.firmware.bundle_load import load_bundle
from octune.firmware.export import export_bundle
from octune.kernels.gemm import gemm_query, gemm_workload
from octune.lookup.data import Entry, QueryError
from octune.lookup.semantics import KernelIndex
from octune.lookup.tables import StoreLookup, build_table, resolve_device
from octune.runtime.config_sources import BundleConfigs, StoreConfigs

SIZES = [1, 3, 16, 17, 64, 100, 128, 255, 256, 512, 1000, 1024, 2048, 4096]


def legal_configs(count: int, seed: int) -> list[dict[str, int]]:
    """Varied configs that the gemm space accepts on DEVICE."""
    space = load_kernel("gemm").space
    rng, found = random.Random(seed), []
    while len(found) < count:
        candidate = config(
            MWG=rng.choice([16, 32, 64, 128]), NWG=rng.choice([16, 32, 64, 128]),
            MDIMC=rng.choice([4, 8, 16]), NDIMC=rng.choice([4, 8, 16]), KWG=rng.choice([8, 16]),
        )  # fmt: skip
        try:
            space.check(candidate, DEVICE.limits)
        except SpaceError:
            continue
        found.append(candidate)
    return found


@pytest.fixture(scope="module")
def tuned_store(tmp_path_factory):
    """40 workloads over all layouts, each with two or three measured configs."""
    path = tmp_path_factory.mktemp("bundle") / "tuned.db"
    rng = random.Random(11)
    configs = legal_configs(12, seed=3)
    with Store(f"sqlite:///{path}") as store:
        shapes = {
            (rng.choice(SIZES), rng.choice(SIZES), rng.choice(SIZES), rng.random() < 0.5,
             rng.random() < 0.3)
            for _ in range(40)
        }  # fmt: skip
        kernel = load_kernel("gemm")
        ids = (
            store.device_id(DEVICE),
            store.kernel_version_id("gemm", kernel.sha256, kernel.source, kernel.space.source_text),
        )
        for shape in sorted(shapes):
            workload = gemm_workload(*shape)
            workload_id = store.workload_id("gemm", workload.key, workload.shape, "float32")
            session = store.start_session(*ids, workload_id, "random", 0, {})
            for chosen in rng.sample(configs, 3):
                seconds = workload.flops / (rng.uniform(1, 100) * 1e9)
                store.add_measurement(session, _ok(chosen, seconds, workload.flops))
            store.finish_session(session, "completed")
        yield store


def _ok(chosen: dict[str, int], seconds: float, flops: int):
    from octune.core.results import Measurement, Status

    return Measurement(chosen, Status.OK, (seconds * 1.01, seconds, seconds * 0.99), flops)


def test_store_and_bundles_answer_identically(tuned_store, tmp_path):
    """The service's path (SQLAlchemy) and both offline formats, on the same random queries."""
    service = StoreLookup(tuned_store)
    device = service.device(DEVICE.fingerprint)
    bundles = {}
    for fmt in ("json", "sqlite"):
        export_bundle(tuned_store, DEVICE.fingerprint, None, fmt, tmp_path / fmt)
        bundles[fmt] = load_bundle(tmp_path / fmt)
    table = service.index(device, "gemm").table
    assert len(table.tuned) >= 35
    matches = set()
    for query in random_queries(table, 400, seed=1):
        expected = service.lookup(device, query).to_dict()
        matches.add(expected["match"])
        for bundle in bundles.values():
            assert bundle.lookup(query).to_dict() == expected, query
    assert matches == {"exact", "nearest"}
    assert bundles["json"].tables["gemm"] == table == bundles["sqlite"].tables["gemm"]
    assert bundles["json"].sources["gemm"][0] == load_kernel("gemm").source


def test_c_header_answers_as_python(tuned_store, tmp_path):
    table = build_table(tuned_store, resolve_device(tuned_store, "example"), "gemm")
    grid = tuple(
        Entry((s, s, s, ta, 0), "float32", table.tuned[i].config, 1.0, 0.0, 10.0 + i, f"g{s}")
        for i, (s, ta) in enumerate([(32, 0), (512, 0), (512, 1), (4096, 1)])
    )
    # Launch sizes that only some configs can meet for a given N and M, so legality decides.
    strict = ("N", "M", "KDIMC")
    # The rest of the language: conditionals, and/or giving a value, powers.
    language = ("N if N % 2 == 0 and not TRANSB else round_up(N, 4)", "(TRANSA and M) or M ** 1",
                "KDIMC")  # fmt: skip
    variants = {
        "tuned": table,
        "predicted": replace(table, tuned=(), predictions=grid),
        "mixed": replace(table, predictions=grid),  # far neighbours yield to the grid
        "default": replace(table, tuned=()),
        "strict": replace(table, launch_global=strict),
        "strict-empty": replace(table, tuned=(), launch_global=strict),
        # The rest of the language: conditionals, and/or giving a value, powers.
        "language": replace(table, launch_global=language),
    }
    for name, variant in variants.items():
        program = compile_header(variant, tmp_path / name)
        index = KernelIndex(variant)
        # ... and shapes the tuner refuses (an operand over 2^31 elements): none, in both.
        refused = [gemm_query(1 << 20, 1 << 20, 1), gemm_query(3000, 5, 1 << 20)]
        queries = random_queries(table, 250, seed=len(name)) + refused
        expected = []
        for query in queries:
            try:
                expected.append(python_line(index.lookup(query)))
            except QueryError:
                expected.append("none")
        stdin = "".join("gemm " + " ".join(map(str, q.shape.values())) + "\n" for q in queries)
        result = subprocess.run([program], input=stdin, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        for query, want, got in zip(queries, expected, result.stdout.splitlines(), strict=True):
            assert got == want, (name, dict(query.shape))
        source = subprocess.run([program, "source"], capture_output=True, text=True, timeout=60)
        assert source.stdout == load_kernel("gemm").source
        kinds = {line.split(" ", 1)[0] for line in expected}
        assert (
            kinds
            == {
                "tuned": {"exact", "nearest", "none"},
                "predicted": {"predicted", "none"},
                "mixed": {"exact", "nearest", "predicted", "none"},
                "default": {"default", "none"},
                "strict": {"exact", "nearest", "none"},
                "strict-empty": {"default", "none"},
                "language": {"exact", "nearest", "none"},
            }[name]
        )


def test_tune_export_lookup_import_end_to_end(tmp_path, cli):
    """A real tuning session on the OpenCL device, then the whole firmware path by CLI."""
    db = tmp_path / "tuned.db"
    shape = ["--m", "96", "--n", "80", "--k", "8", "--transa"]
    tuned = octune("tune", "gemm", *shape, "--budget", "2", "--seed", "5",
                   "--confirm", "0", db=db)  # fmt: skip
    assert tuned.returncode == 0, tuned.stderr + tuned.stdout
    with Store(f"sqlite:///{db}") as store:
        (device,) = store.stored_devices()
        service = StoreLookup(store)
        expected = service.lookup(device, gemm_query(60, 40, 20)).to_dict()
        exact = service.lookup(device, gemm_query(96, 80, 8, transa=True)).to_dict()

    for fmt in ("json", "sqlite", "c-header"):
        exported = cli("export", "--device", device.fingerprint[:6], "--format", fmt,
                       "--out", str(tmp_path / fmt), db=db)  # fmt: skip
        assert exported.returncode == 0, exported.stderr
        assert "1 workloads" in exported.stdout
    answer = cli("lookup", str(tmp_path / "json"), "gemm", "--m", "60", "--n", "40", "--k", "20")
    assert answer.returncode == 0, answer.stderr
    assert json.loads(answer.stdout) == expected
    assert expected["match"] == "nearest" and exact["match"] == "exact"

    merged = tmp_path / "team.db"
    first = cli("import", str(tmp_path / "sqlite"), db=merged)
    assert first.returncode == 0, first.stderr
    assert "Imported 1 measurements" in first.stdout
    again = cli("import", str(tmp_path / "json"), db=merged)
    assert "Imported 0 measurements" in again.stdout and "1 were already stored" in again.stdout
    with Store(f"sqlite:///{merged}") as store:
        lookup = StoreLookup(store)
        moved = lookup.lookup(lookup.device(device.fingerprint), gemm_query(96, 80, 8, True))
        assert moved.to_dict() == exact


def test_a_bundle_offers_the_databases_neighbour_configs(tuned_store, tmp_path):
    """What a first-use confirmation runs beside the answer, from a database and from the
    bundle exported of it: the same configs in the same order.
    """
    export_bundle(tuned_store, DEVICE.fingerprint, ["gemm"], "json", tmp_path / "b")
    database, bundle = StoreConfigs(tuned_store, DEVICE), BundleConfigs(tmp_path / "b", DEVICE)
    kernel = load_kernel("gemm")
    table = StoreLookup(tuned_store).index(database.device, "gemm").table
    counts = set()
    for query in random_queries(table, 60, seed=4):
        expected = database.neighbours(kernel, query.shape, "float32", 4)
        assert bundle.neighbours(kernel, query.shape, "float32", 4) == expected
        counts.add(len(expected))
    assert 4 in counts


@pytest.fixture
def bundle(tuned_store, tmp_path) -> Path:
    export_bundle(tuned_store, DEVICE.fingerprint, ["gemm"], "json", tmp_path / "b")
    return tmp_path / "b"


def rewrite_manifest(bundle: Path, change) -> None:
    manifest = json.loads((bundle / MANIFEST).read_text())
    change(manifest)
    (bundle / MANIFEST).write_text(json.dumps(manifest))


def _rehash(bundle: Path, name: str) -> None:
    import hashlib

    content = (bundle / name).read_bytes()

    def change(manifest):
        manifest["files"][name] = {"sha256": hashlib.sha256(content).hexdigest(),
                                   "bytes": len(content)}  # fmt: skip

    rewrite_manifest(bundle, change)


def _truncate(bundle: Path) -> None:
    data = (bundle / "lookup.json").read_bytes()
    (bundle / "lookup.json").write_bytes(data[: len(data) // 2])


def _edit_table(bundle: Path) -> None:
    text = (bundle / "lookup.json").read_text()
    (bundle / "lookup.json").write_text(text.replace('"float32"', '"float31"', 1))


def _edit_and_rehash(bundle: Path) -> None:
    data = json.loads((bundle / "lookup.json").read_text())
    data["kernels"][0]["tuned"]["rows"][0][2] = 10_000  # a config that is not listed
    (bundle / "lookup.json").write_text(json.dumps(data))
    _rehash(bundle, "lookup.json")


def _inject_option(bundle: Path) -> None:
    data = json.loads((bundle / "lookup.json").read_text())
    data["kernels"][0]["extra_build_options"].append("-I/etc")
    (bundle / "lookup.json").write_text(json.dumps(data))
    _rehash(bundle, "lookup.json")


def _edit_source(bundle: Path) -> None:
    (source,) = (bundle / "kernels").glob("*.cl")
    source.write_text(source.read_text() + "\n// patched\n")
    _rehash(bundle, f"kernels/{source.name}")


def _newer(bundle: Path) -> None:
    def change(manifest):
        manifest["octune_bundle"] = SCHEMA_VERSION + 1
        manifest["reads_with"] = "octune>=9.0"

    rewrite_manifest(bundle, change)


def _unsafe_path(bundle: Path) -> None:
    def change(manifest):
        manifest["files"]["../../etc/passwd"] = manifest["files"].pop("lookup.json")

    rewrite_manifest(bundle, change)


def _link_to_zero(name: str) -> Callable[[Path], None]:
    def damage(bundle: Path) -> None:
        (bundle / name).unlink()
        (bundle / name).symlink_to("/dev/zero")

    return damage


@pytest.mark.parametrize(
    ("damage", "fragments"),
    [
        (_truncate, ["lookup.json is truncated", "bytes"]),
        (_edit_table, ["lookup.json does not match its SHA-256", "modified"]),
        (_edit_and_rehash, ["malformed", "config 10000"]),
        (_inject_option, ["malformed", "'-I/etc', not an option octune writes"]),
        (_edit_source, ["sources do not hash to the kernel version"]),
        (_newer, [f"schema version {SCHEMA_VERSION + 1}", "octune>=9.0", "upgrade"]),
        (_unsafe_path, ["does not list lookup.json"]),
        (lambda b: (b / "lookup.json").unlink(), ["missing lookup.json"]),
        # Read whole before any check, /dev/zero would fill the memory.
        (_link_to_zero("lookup.json"), ["lookup.json is not a regular file"]),
        (_link_to_zero(MANIFEST), [f"{MANIFEST} is not a regular file"]),
        (lambda b: (b / MANIFEST).unlink(), ["not an octune bundle"]),
        (lambda b: (b / MANIFEST).write_text('{"octune_bundle": 1, "fi'), ["not valid JSON"]),
    ],
)
def test_damaged_bundles_are_refused(bundle, damage, fragments, cli):
    damage(bundle)
    with pytest.raises(BundleError) as raised:
        load_bundle(bundle)
    message = str(raised.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message
    assert_one_line_error(
        cli("lookup", str(bundle), "gemm", "--m", "8", "--n", "8", "--k", "8"), fragments[0]
    )


def test_an_sqlite_bundle_that_would_run_away_is_refused_in_one_line(
    tuned_store, tmp_path, cli, monkeypatch
):
    """Issue 61: an unsigned SQLite bundle whose ``configs`` is a recursive VIEW held
    `octune lookup` forever. Only tables are read, and every query has a bound.
    """
    import sqlite3

    from octune.firmware import bundle_load as bundles

    path = tmp_path / "view"
    export_bundle(tuned_store, DEVICE.fingerprint, ["gemm"], "sqlite", path)
    connection = sqlite3.connect(path / "lookup.sqlite")
    with connection:
        connection.execute("ALTER TABLE configs RENAME TO configs_kept")
        connection.execute(
            "CREATE VIEW configs AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 "
            "FROM n) SELECT '[1]' AS config_values, 1 AS kernel_id, i AS position FROM n"
        )
    connection.close()
    _rehash(path, "lookup.sqlite")
    with pytest.raises(BundleError, match="holds table configs_kept, view configs"):
        load_bundle(path)
    assert_one_line_error(cli("lookup", str(path), "gemm", "--m", "8", "--n", "8", "--k", "8"),
                          "which octune never writes")  # fmt: skip
    # However a query would run away, it stops at its bound (lowered here to cross it).
    plain = tmp_path / "plain"
    export_bundle(tuned_store, DEVICE.fingerprint, ["gemm"], "sqlite", plain)
    monkeypatch.setattr(bundles, "SQLITE_MIN_STEPS", 0)
    monkeypatch.setattr(bundles, "SQLITE_STEPS_PER_BYTE", 0)
    monkeypatch.setattr(bundles, "SQLITE_STEP_CHECK", 1)
    with pytest.raises(BundleError, match="ran past its bound"):
        load_bundle(plain)


def test_unsafe_names_in_the_manifest_are_refused(bundle):
    def change(manifest):
        manifest["files"]["../outside"] = {"sha256": "0" * 64, "bytes": 1}

    rewrite_manifest(bundle, change)
    from octune.firmware.bundle_load import read_manifest, read_verified

    with pytest.raises(BundleError, match="unsafe path"):
        read_verified(bundle, read_manifest(bundle), "../outside")


def test_export_and_import_mistakes_are_one_line_errors(tuned_store, tmp_path, cli):
    db = tmp_path / "empty.db"
    with Store(f"sqlite:///{db}") as store:
        store.device_id(DEVICE)
    out = str(tmp_path / "o")
    assert_one_line_error(cli("export", "-d", "example", "--out", out, db=db), "nothing is tuned")
    assert_one_line_error(
        cli("export", "-d", "nvidia", "--out", out, db=db), "no device 'nvidia'", "example-cpu"
    )
    assert_one_line_error(
        cli("export", "-d", "example", "--format", "xml", "--out", out, db=db), "--format 'xml'"
    )
    export_bundle(tuned_store, "example", None, "c-header", tmp_path / "h")
    # As a header written before its tables came along.
    (tmp_path / "h" / "lookup.json").unlink()
    rewrite_manifest(tmp_path / "h", lambda manifest: manifest["files"].pop("lookup.json"))
    assert_one_line_error(cli("import", str(tmp_path / "h"), db=db), "C header written before")
    assert_one_line_error(cli("import", str(tmp_path / "nowhere"), db=db), "not a bundle")
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(BundleError, match="cannot write bundle"):
        export_bundle(tuned_store, "example", None, "json", blocker / "sub")


def test_bundle_copies_answer_like_the_original(bundle, tmp_path):
    """A bundle is relocatable: paths in the manifest are relative."""
    copy = tmp_path / "copy"
    shutil.copytree(bundle, copy)
    query = gemm_query(200, 300, 400)
    assert load_bundle(copy).lookup(query) == load_bundle(bundle).lookup(query)
    with pytest.raises(QueryError, match="no kernel 'conv'"):
        load_bundle(copy).lookup(replace(query, kernel="conv"))
    with pytest.raises(QueryError, match="m=0"):
        load_bundle(copy).lookup(gemm_query(0, 1, 1))


def _poison_config(bundle: Path) -> None:
    """What an attacker with the files does: MWG=4096 and an injected build option in the
    first tuned entry's config, then the checksum recomputed so the manifest agrees.
    """
    data = json.loads((bundle / "lookup.json").read_text())
    table = data["kernels"][0]
    config = table["configs"][table["tuned"]["rows"][0][2]]
    config[table["parameters"].index("MWG")] = 4096
    table["extra_build_options"] = [*table["extra_build_options"], "-DINJECTED=1"]
    (bundle / "lookup.json").write_text(json.dumps(data))
    _rehash(bundle, "lookup.json")


def test_signed_bundles_verify_and_an_edit_with_recomputed_checksums_does_not(
    tuned_store, tmp_path, cli
):
    key = tmp_path / "keys" / "octune.key"
    key.parent.mkdir()
    made = cli("keygen", str(key))
    assert made.returncode == 0, made.stderr
    public = key.with_name("octune.key.pub")
    assert key.stat().st_mode & 0o777 == 0o600 and public.is_file()
    assert "PRIVATE KEY" not in made.stdout  # the secret is written, never printed
    assert cli("keygen", str(key)).returncode == 2  # never overwritten

    tuned_db = Path(tuned_store.url.removeprefix("sqlite:///"))
    signed = tmp_path / "signed"
    exported = cli("export", "--device", DEVICE.fingerprint, "--format", "json", "--out",
                   str(signed), "--no-model", "--sign-key", str(key), db=tuned_db)  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    assert "signed" in exported.stdout
    query = ["--m", "64", "--n", "64", "--k", "64"]
    assert cli("lookup", str(signed), "gemm", *query, "--public-key", str(public)).returncode == 0
    # The key may come as PEM text, as a CI secret in the environment would hold it.
    assert load_bundle(signed, public.read_text()).lookup(gemm_query(64, 64, 64)).match

    _poison_config(signed)
    refused = cli("lookup", str(signed), "gemm", *query, "--public-key", str(public))
    assert_one_line_error(refused, "signature does not match")
    # `run --bundle` verifies too, before it builds anything of the bundle's (issue 45).
    ran = cli("run", "squeezenet1.1", "--bundle", str(signed), "--public-key", str(public))
    assert_one_line_error(ran, "signature does not match")
    # Without a key the checksums pass, but import checks each config against the space.
    merged = tmp_path / "merged.db"
    assert_one_line_error(cli("import", str(signed), db=merged), "not one its space allows",
                          "MWG", "nothing was imported")  # fmt: skip
    with Store(f"sqlite:///{merged}") as store:
        assert store.stored_devices() == []

    other = tmp_path / "other.key"
    cli("keygen", str(other))
    unsigned = tmp_path / "unsigned"
    export_bundle(tuned_store, DEVICE.fingerprint, ["gemm"], "json", unsigned)
    assert_one_line_error(cli("import", str(unsigned), "--public-key", str(public), db=merged),
                          "is not signed")  # fmt: skip
    resigned = tmp_path / "resigned"
    cli("export", "--device", DEVICE.fingerprint, "--format", "json", "--out", str(resigned),
        "--no-model", "--sign-key", str(other), db=tuned_db)  # fmt: skip
    assert_one_line_error(cli("lookup", str(resigned), "gemm", *query, "--public-key", str(public)),
                          "signed with another key")  # fmt: skip
    assert_one_line_error(cli("lookup", str(resigned), "gemm", *query, "--public-key", str(key)),
                          "not a PEM public key")  # fmt: skip


SPLIT_PROGRAM = r"""
#include <stdio.h>
#include "octune_lookup.h"

int main(void) {
    long long q[5];
    unsigned i, d;
    struct octune_config cfg;
    while (scanf("%lld %lld %lld %lld %lld", &q[0], &q[1], &q[2], &q[3], &q[4]) == 5) {
        if (!octune_kernel_gemm_splitk_lookup((const int64_t *)q, &cfg)) {
            printf("none\n");
            continue;
        }
        printf("%s %zu", octune_match_names[cfg.match], cfg.workspace_bytes);
        for (i = 0; i < cfg.then_count; i++) {
            printf(" | %s", cfg.then_entry[i]);
            for (d = 0; d < cfg.then_work_dim[i]; d++)
                printf(" %zu/%zu", cfg.then_global_size[i][d], cfg.then_local_size[i][d]);
        }
        printf("\n");
    }
    return 0;
}
"""


def test_split_k_answers_carry_the_second_launch_and_the_workspace(tmp_path):
    """A kernel with a follow-up launch and scratch memory: the service, both bundle formats
    and the C header give the same sum launch and workspace, sized for the queried shape and
    never more than one buffer on the device holds (8192 x 8192 x 65536: KSPLIT 4 at most).
    """
    kernel = load_kernel("gemm_splitk")
    table = kernel.space.enumerate(DEVICE.limits)
    rng = random.Random(5)
    with Store(f"sqlite:///{tmp_path / 'split.db'}") as store:
        ids = (
            store.device_id(DEVICE),
            store.kernel_version_id(
                kernel.name, kernel.sha256, kernel.source, kernel.space.source_text
            ),
        )
        for shape in [(64, 64, 4096), (256, 128, 8192), (7, 300, 2000), (1, 96, 1024)]:
            workload = gemm_workload(*shape, transb=shape[0] == 1)
            workload_id = store.workload_id("gemm", workload.key, workload.shape, "float32")
            session = store.start_session(*ids, workload_id, "random", 0, {})
            for _ in range(2):
                chosen = table.config(rng.randrange(len(table)))
                seconds = workload.flops / (rng.uniform(1, 100) * 1e9)
                store.add_measurement(session, _ok(chosen, seconds, workload.flops))
            store.finish_session(session, "completed")

        service = StoreLookup(store)
        device = service.device(DEVICE.fingerprint)
        for fmt in ("json", "sqlite"):
            export_bundle(store, DEVICE.fingerprint, None, fmt, tmp_path / fmt)
        bundles = [load_bundle(tmp_path / fmt) for fmt in ("json", "sqlite")]
        split = service.index(device, "gemm_splitk").table
        queries = [
            replace(gemm_query(*shape), kernel="gemm_splitk")
            for shape in [
                (64, 64, 4096),
                (100, 50, 3000, True),
                (3, 200, 5000, False, True),
                (8192, 8192, 65536),
            ]
        ]
        most = max_buffer_bytes(DEVICE.global_mem_size)
        assert any(
            4 * e.config[split.parameters.index("KSPLIT")] * 8192**2 > most for e in split.tuned
        )
        lines = []
        for query in queries:
            answer = service.lookup(device, query)
            for bundle in bundles:
                assert bundle.lookup(query).to_dict() == answer.to_dict()
            s = query.shape
            assert answer.workspace_bytes == 4 * answer.config["KSPLIT"] * s["m"] * s["n"]
            assert answer.workspace_bytes <= most
            ((entry, global_size, local_size),) = answer.then
            rwg = answer.config["RWG"]
            assert entry == "gemm_splitk_sum" and local_size == (rwg,)
            assert global_size == (-(-s["m"] * s["n"] // rwg) * rwg,)
            assert answer.global_size[2] == answer.config["KSPLIT"] * answer.config["KDIMC"]
            sizes = "".join(f" {g}/{lo}" for g, lo in zip(global_size, local_size, strict=True))
            lines.append(f"{answer.match} {answer.workspace_bytes} | {entry}{sizes}")

    write_bundle(tmp_path / "c", "c-header", {"name": "test", "fingerprint": DEVICE.fingerprint},
                 [split], {split.sha256: (kernel.source, kernel.space.source_text)})  # fmt: skip
    main, program = tmp_path / "c" / "main.c", tmp_path / "c" / "lookup"
    main.write_text(SPLIT_PROGRAM)
    subprocess.run([*GCC, "-I", str(main.parent), "-o", str(program), str(main)],
                   check=True, capture_output=True, text=True, timeout=120)  # fmt: skip
    stdin = "".join(" ".join(map(str, q.shape.values())) + "\n" for q in queries)
    result = subprocess.run([program], input=stdin, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == lines
