"""A bundle is enough for a runtime without Python: examples/c's octune_demo, a C99 program,
includes a header exported from a real tuning run, builds each answer's source with the
OpenCL C API (Debian's ICD loader, the same CPU runtimes octune uses), launches every step it
names with the workspace it asks for, and checks the result against a C reference; the header
compiles as C++ too; and its lookup answers as Python's on 32- and 64-bit ARM and RISC-V
under qemu, where those cross compilers are installed (.ci/run installs them).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from helpers.c_lookup import EXAMPLES, python_line
from helpers.cli_testing import octune

from octune.db.store import Store
from octune.firmware.bundle import write_bundle
from octune.lookup.data import Query, QueryError
from octune.lookup.semantics import KernelIndex, best_answer
from octune.lookup.tables import build_table, resolve_device
from octune.tuner.device import DeviceInfo

TUNED = [("gemm", ["--m", "64", "--n", "48", "--k", "32"]),
         ("conv2d", ["--n", "1", "--c", "8", "--h", "16", "--w", "16", "--k", "16", "--r", "3",
                     "--s", "3", "--pad", "1"]),
         # a pointwise conv at batch 2: the GEMM entry's arguments, one GEMM per image
         ("conv2d_1x1", ["--n", "2", "--c", "8", "--h", "9", "--w", "11", "--k", "16",
                         "--r", "1", "--s", "1"])]  # fmt: skip
CHECKS = ["gemm:64,48,32", "gemm:100,37,29", "conv2d:1,8,16,16,16,3,3,1,1",
          "conv2d:1,3,17,17,8,3,3,2,1", "conv2d:2,8,9,11,16,1,1"]  # fmt: skip
CXX = ["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only"]
#: Debian's cross compilers, the qemu that runs each target, and what the target is.
CROSS = {
    "armhf": ("arm-linux-gnueabihf-gcc", "qemu-arm-static"),  # 32-bit long and pointers
    "aarch64": ("aarch64-linux-gnu-gcc", "qemu-aarch64-static"),
    "riscv64": ("riscv64-linux-gnu-gcc", "qemu-riscv64-static"),
}

needs_opencl_sdk = pytest.mark.skipif(
    not Path("/usr/include/CL/cl.h").exists() or shutil.which("make") is None,
    reason="the OpenCL headers and ICD loader (Debian's opencl-headers, ocl-icd-opencl-dev; "
    ".ci/run installs them) are missing",
)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory, device_info: DeviceInfo) -> Path:
    """A database with a GEMM and two conv2d shapes tuned on the suite's device."""
    db = tmp_path_factory.mktemp("consumer") / "tuned.db"
    for target, shape in TUNED:
        result = octune("tune", target, *shape, "--budget", "3", "--confirm", "1",
                        "--seed", "1", db=db)  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
    return db


def _export(db: Path, out: Path, device: DeviceInfo) -> Path:
    result = octune("export", "-d", device.fingerprint, "--out", str(out), "--format",
                    "c-header", "--no-model", db=db)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return out


def _vendors(folder: Path) -> Path:
    """An OCL_ICD_VENDORS folder for Debian's loader with the runtimes octune sees: the
    .icd files octune registered, and PoCL's from the pyopencl wheel (named there relative
    to the wheel's own loader).
    """
    import pyopencl

    folder.mkdir(exist_ok=True)
    current = os.environ.get("OCL_ICD_VENDORS")
    if current and Path(current).is_dir():
        for icd in Path(current).glob("*.icd"):
            shutil.copy(icd, folder / icd.name)
    libs = Path(pyopencl.__file__).parent / ".libs"
    for icd in libs.glob("*.icd"):
        (folder / icd.name).write_text(f"{libs / icd.read_text().strip()}\n")
    return folder


def _demo(header: Path, out: Path, checks: list[str], vendors: Path) -> subprocess.CompletedProcess:
    out.mkdir(exist_ok=True)
    built = subprocess.run(["make", "-s", "-C", str(EXAMPLES), f"HEADER_DIR={header}",
                            f"OUT={out}"], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    env = {**os.environ, "OCL_ICD_VENDORS": str(vendors)}
    return subprocess.run([str(out / "octune_demo"), *checks], capture_output=True, text=True,
                          timeout=600, env=env)  # fmt: skip


@needs_opencl_sdk
def test_a_c_runtime_builds_launches_and_checks_what_the_header_answers(
    tuned: Path, tmp_path: Path, device_info: DeviceInfo
) -> None:
    header = _export(tuned, tmp_path / "bundle", device_info)
    vendors = _vendors(tmp_path / "vendors")
    ran = _demo(header, tmp_path / "bin", CHECKS, vendors)
    lines = ran.stdout.splitlines()
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert len(lines) == len(CHECKS) and all(": ok " in line for line in lines), ran.stdout
    assert "exact conv2d_1x1 (gemm, 1 launch)" in lines[4]  # the batched pointwise GEMM
    # `octune lookup` of the header's bundle answers what the header does.
    shown = octune("lookup", str(header), "gemm", "--m", "100", "--n", "37", "--k", "29")
    assert shown.returncode == 0, shown.stderr
    assert f"{json.loads(shown.stdout)['match']} {json.loads(shown.stdout)['kernel']}" in lines[1]
    kinds = {(line.split(":")[0], line.split()[2]) for line in lines}
    assert kinds == {("gemm", "exact"), ("gemm", "nearest"), ("conv2d", "exact"),
                     ("conv2d", "nearest")}  # fmt: skip
    assert all("matches the C reference" in line for line in lines)

    # A kernel not tuned on the device answers its default config: the same path in C.
    with Store(f"sqlite:///{tuned}") as store:
        device = resolve_device(store, device_info.fingerprint)
        tables = [replace(build_table(store, device, name), tuned=())
                  for name in store.tuned_kernel_names(device.fingerprint)]  # fmt: skip
        stored = [store.lookup_kernel(device.fingerprint, t.kernel, t.sha256) for t in tables]
        sources = {s.sha256: (s.template_source, s.space_source) for s in stored if s}
    default = tmp_path / "default"
    write_bundle(default, "c-header", {"name": device_info.name, "fingerprint":
                 device_info.fingerprint, "driver_version": device_info.driver_version},
                 tables, sources)  # fmt: skip
    ran = _demo(default, tmp_path / "bin-default", CHECKS, vendors)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert [line.split()[2] for line in ran.stdout.splitlines()] == ["default"] * len(CHECKS)

    # Liveness: a kernel that computes 2 x alpha x A x B is caught, in a line, with status 1.
    broken = tmp_path / "broken"
    shutil.copytree(header, broken)
    text = (broken / "octune_lookup.h").read_text()
    assert "panel_block(M, N, K, alpha," in text
    (broken / "octune_lookup.h").write_text(
        text.replace("panel_block(M, N, K, alpha,", "panel_block(M, N, K, 2.0f * alpha,")
    )
    ran = _demo(broken, tmp_path / "bin-broken", ["gemm:64,48,32"], vendors)
    assert ran.returncode == 1 and "FAIL" in ran.stdout and "WRONG RESULT" in ran.stdout


def test_the_header_compiles_as_cpp_and_its_query_structs_take_defaults(
    tuned: Path, tmp_path: Path, device_info: DeviceInfo
) -> None:
    header = _export(tuned, tmp_path / "bundle", device_info)
    program = tmp_path / "use.cpp"
    program.write_text(
        '#include "octune_lookup.h"\n'
        "int main() {\n"
        "    struct octune_config cfg;\n"
        "    struct octune_conv2d_query q;\n"
        "    memset(&q, 0, sizeof q);\n"
        "    q.n = 1; q.c = 8; q.h = 16; q.w = 16; q.k = 16; q.r = 3; q.s = 3; q.pad = 1;\n"
        "    if (!octune_conv2d_lookup_query(&q, &cfg)) return 1;\n"
        "    return cfg.match == OCTUNE_MATCH_EXACT ? 0 : 2;\n"
        "}\n"
    )
    compiled = subprocess.run([*CXX, "-I", str(header), str(program)], capture_output=True,
                              text=True, timeout=120)  # fmt: skip
    assert compiled.returncode == 0, compiled.stderr
    c99 = tmp_path / "use.c"
    c99.write_text(
        '#include "octune_lookup.h"\n'
        "int main(void) {\n"
        "    struct octune_config cfg;\n"
        "    int exact = octune_conv2d_lookup_query(&(struct octune_conv2d_query){.n = 1,\n"
        "        .c = 8, .h = 16, .w = 16, .k = 16, .r = 3, .s = 3, .pad = 1}, &cfg);\n"
        "    int none = octune_conv2d_lookup_query(&(struct octune_conv2d_query){.n = 1}, &cfg);\n"
        '    printf("%s %s\\n", octune_match_names[exact], octune_match_names[none]);\n'
        "    return 0;\n"
        "}\n"
    )
    binary = tmp_path / "use"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I",
                    str(header), "-o", str(binary), str(c99)], check=True, timeout=120)  # fmt: skip
    # Keys left 0 take their defaults (stride, dilation, groups 1); a shape with no channels
    # is none, which `if (!lookup)` reads as the failure it is.
    assert subprocess.run([binary], capture_output=True, text=True).stdout == "exact none\n"


def _random_queries(family: str, keys: tuple[str, ...], count: int, seed: int) -> list[Query]:
    """Random shapes of the family, as queries of the family (the C lookup asks every kernel of
    it the header has)."""
    rng = random.Random(seed)
    queries = []
    for _ in range(count):
        if family == "gemm":
            shape = {"m": rng.randint(1, 3000), "n": rng.randint(1, 3000),
                     "k": rng.randint(1, 3000), "transa": rng.randint(0, 1),
                     "transb": rng.randint(0, 1)}  # fmt: skip
        else:
            c = rng.choice([1, 3, 8, 16, 64, 256])
            shape = {"n": rng.randint(1, 4), "c": c, "h": rng.randint(3, 120),
                     "w": rng.randint(3, 120), "k": rng.choice([8, 16, 64, 128]),
                     "groups": 1, "r": rng.choice([1, 3, 5]), "s": rng.choice([1, 3, 5]),
                     "stride": rng.randint(1, 2), "pad": rng.randint(0, 2), "dilation": 1,
                     "nhwc": 0}  # fmt: skip
        queries.append(Query(family, {key: shape[key] for key in keys}))
    return queries


@pytest.mark.parametrize("target", list(CROSS))
def test_the_lookup_answers_as_python_on_arm_and_risc_v(
    target: str, tuned: Path, tmp_path: Path, device_info: DeviceInfo
) -> None:
    """octune_query cross-compiled (static, -Werror -pedantic) and run under qemu-user, on
    random GEMM and conv2d queries: every line as the Python lookup answers it.
    """
    compiler, emulator = CROSS[target]
    if shutil.which(compiler) is None or shutil.which(emulator) is None:
        pytest.skip(f"{compiler} or {emulator} is not installed (.ci/run installs them)")
    header = _export(tuned, tmp_path / "bundle", device_info)
    built = subprocess.run(["make", "-s", "-C", str(EXAMPLES), f"HEADER_DIR={header}",
                            f"OUT={tmp_path}", f"CC={compiler}", "LDFLAGS=-static",
                            str(tmp_path / "octune_query")],
                           capture_output=True, text=True, timeout=300)  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    with Store(f"sqlite:///{tuned}") as store:
        device = resolve_device(store, device_info.fingerprint)
        tables = [build_table(store, device, name)
                  for name in store.tuned_kernel_names(device.fingerprint)]  # fmt: skip
    # A line asks a family, which the header answers with its fastest kernel (best_answer).
    families: dict[str, list[KernelIndex]] = {}
    for table in tables:
        families.setdefault(table.problem.name, []).append(KernelIndex(table))
    lines, expected = [], []
    for family, indexes in families.items():
        keys = indexes[0].table.problem.keys
        tuned_shapes = [Query(family, dict(zip(keys, e.shape, strict=True)))
                        for index in indexes for e in index.table.tuned]  # fmt: skip
        randoms = _random_queries(family, keys, 150, seed=len(target))
        for query in [*tuned_shapes, *randoms]:
            lines.append(f"{family} " + " ".join(str(query.shape[key]) for key in keys))
            try:
                answer = best_answer(indexes, query)
            except QueryError:
                expected.append("none")
                continue
            expected.append(python_line(answer))
    ran = subprocess.run([emulator, str(tmp_path / "octune_query")], input="\n".join(lines),
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    for line, want, got in zip(lines, expected, ran.stdout.splitlines(), strict=True):
        assert got == want, (target, line)
    assert {want.split(" ", 1)[0] for want in expected} >= {"exact", "nearest"}


def test_two_devices_headers_live_in_one_firmware(
    tuned: Path, tmp_path: Path, device_info: DeviceInfo
) -> None:
    """`export --prefix` renames the header's functions, types, macros and guard, never the
    kernel sources or build options (which name OCTUNE_ defines of the templates).
    """
    for prefix in ("mali", "cortex"):
        result = octune("export", "-d", device_info.fingerprint, "--out",
                        str(tmp_path / prefix), "--format", "c-header", "--no-model",
                        "--prefix", prefix, db=tuned)  # fmt: skip
        assert result.returncode == 0, result.stderr
    text = (tmp_path / "mali" / "octune_lookup.h").read_text()
    assert "MALI_LOOKUP_H" in text and "mali_gemm_lookup(" in text
    assert "octune_gemm_lookup" not in text and "OCTUNE_MATCH" not in text
    assert 'mali_kernel_gemm_panel_extra_options_[] = "-DOCTUNE_ENTRY_gemm_panel_pack -w"' in text
    program = tmp_path / "both.c"
    program.write_text(
        '#include "mali/octune_lookup.h"\n#include "cortex/octune_lookup.h"\n'
        "int main(void) {\n    struct mali_config a;\n    struct cortex_config b;\n"
        "    int x = mali_gemm_lookup(64, 48, 32, 0, 0, &a);\n"
        "    int y = cortex_gemm_lookup(64, 48, 32, 0, 0, &b);\n"
        '    printf("%s %s\\n", mali_match_names[x], cortex_match_names[y]);\n'
        "    return !(x == MALI_MATCH_EXACT && y == CORTEX_MATCH_EXACT);\n}\n"
    )
    for compiler in (["gcc", "-std=c99"], ["g++", "-x", "c++", "-std=c++17"]):
        built = subprocess.run([*compiler, "-Wall", "-Wextra", "-Werror", "-pedantic", "-I",
                                str(tmp_path), "-o", str(tmp_path / "both"), str(program)],
                               capture_output=True, text=True, timeout=120)  # fmt: skip
        assert built.returncode == 0, built.stderr
        ran = subprocess.run([tmp_path / "both"], capture_output=True, text=True, timeout=60)
        assert (ran.returncode, ran.stdout) == (0, "exact exact\n")
    refused = octune("export", "-d", device_info.fingerprint, "--out", str(tmp_path / "x"),
                     "--format", "json", "--prefix", "mali", db=tuned)  # fmt: skip
    assert refused.returncode == 2 and "add --format c-header" in refused.stderr
