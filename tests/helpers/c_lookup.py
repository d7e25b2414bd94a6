"""The C side of the header tests: examples/c/octune_query.c compiled over a header, and the
line it prints for an answer, written from the Python answer for comparison.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from octune.catalogue.registry import load_kernel
from octune.firmware.bundle import write_bundle
from octune.lookup.data import Answer, LookupTable

GCC = ["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O1"]
EXAMPLES = Path(__file__).resolve().parent.parent.parent / "examples" / "c"
QUERY_PROGRAM = EXAMPLES / "octune_query.c"


def compile_query(header_dir: Path, compiler: list[str] = GCC) -> Path:
    """octune_query over the header in ``header_dir``, built there."""
    program = header_dir / "lookup"
    subprocess.run([*compiler, "-I", str(header_dir), "-o", str(program), str(QUERY_PROGRAM)],
                   check=True, capture_output=True, text=True, timeout=120)  # fmt: skip
    return program


def python_line(answer: Answer | None) -> str:
    """What octune_query prints, from the Python answer (None: "none")."""
    if answer is None:
        return "none"
    defines = "".join(f" {name}={value}" for name, value in answer.defines.items())
    launch = zip(answer.global_size, answer.local_size, strict=True)
    sizes = "".join(f" {global_}/{local}" for global_, local in launch)
    time_s = -1.0 if answer.time_s is None else answer.time_s
    gflops = -1.0 if answer.gflops is None else answer.gflops
    source = (
        " -" if answer.source is None else "".join(f" {v}" for v in answer.source["shape"].values())
    )
    return (
        f"{answer.match}{defines} |{sizes} | {time_s:.17g} {gflops:.17g} |{source} | "
        f"{answer.build_options} | {answer.kernel} {answer.entry} {answer.kernel_sha256}"
    )


def compile_header(table: LookupTable, out: Path) -> Path:
    kernel = load_kernel("gemm")
    # The device's name goes into a C comment: "/*" and "*/" in it must neither end the comment
    # nor fail a -Werror build (-Wcomment).
    device = {"name": "test /* GPU */ of /*/ names", "fingerprint": table.device_fingerprint}
    write_bundle(out, "c-header", device, [table],
                 {table.sha256: (kernel.source, kernel.space.source_text)})  # fmt: skip
    return compile_query(out)
