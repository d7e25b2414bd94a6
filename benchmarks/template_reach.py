"""Which builds a template edit reaches, without a device: each config of earlier runs (the
``--runs`` lists ``template_ab.py`` takes), the template before and the installed one run through
the C preprocessor with that config's build options, and the lines that differ printed.

NVIDIA's compiler allocates registers for a GEMM build differently after edits the build never
executes (benchmarks/RESULTS.md, issue 19, fifteenth and sixteenth parts), so an edit meant for
one kernel should leave the other builds' code as it was. Where this prints ``same``, the
device has nothing to compare; where a build differs, time it with ``template_ab.py``. Needs
``cpp`` (GCC's preprocessor).

    git show HEAD:kernels/gemm.cl > build/ab/gemm.cl && cp kernels/*.clh build/ab/
    python benchmarks/template_reach.py --baseline build/ab/gemm.cl \\
        --runs data/h100_edge/configs_edge_ab.json
"""

from __future__ import annotations

import argparse
import difflib
import subprocess
from pathlib import Path

from lib.gemm_shapes import parse_shape
from lib.runs import add_missing_argument, assignments, chosen_configs

from octune.catalogue.registry import expand_includes, load_kernel

#: Defined by NVIDIA's OpenCL compiler: the templates' NVIDIA paths (cp.async, fences) compare too.
DEVICE_DEFINES = ["-Dcl_nv_pragma_unroll=1"]


def preprocessed(source: str, defines: list[str]) -> list[str]:
    """The source as the compiler's front end sees it: one line per line of code, whitespace
    collapsed.
    """
    text = subprocess.run(
        ["cpp", "-P", "-x", "c", *DEVICE_DEFINES, *defines, "-"],
        input=source,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


def changed_lines(before: list[str], after: list[str]) -> list[str]:
    """The lines removed (``-``) and added (``+``) between two preprocessed sources."""
    diff = difflib.unified_diff(before, after, lineterm="", n=0)
    return [line for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="the template before")
    parser.add_argument("--runs", type=Path, nargs="+", required=True)
    add_missing_argument(parser, "ASYNC=0", "KDIMC=1")
    parser.add_argument("--show", type=int, default=12, help="changed lines printed per build")
    args = parser.parse_args()
    before = expand_includes(args.baseline, args.baseline.parent)
    for shape, name, config in chosen_configs(args.runs, missing=assignments(args.missing)):
        kernel = load_kernel(name)
        options = kernel.build_options(config, parse_shape(shape))
        defines = [option for option in options if option.startswith("-D")]
        changed = changed_lines(preprocessed(before, defines), preprocessed(kernel.source, defines))
        print(f"{shape:>16} {name:>18}  " + (f"{len(changed)} lines differ" if changed else "same"))
        for line in changed[: args.show]:
            print(f"    {line[:150]}")


if __name__ == "__main__":
    main()
