"""Does one-launch split-K ever read a slice before it lands? gemm_splitk_serial's last
work-group of a tile reads the other work-groups' partial products as soon as their counter says
they are done; if the driver lets the counter's atomic overtake the partials' stores, the sum
reads the NaN that the verification fills the workspace with. This runs given configs many
times, each run verified from a NaN-filled workspace, in two variants of the hand-off, and
prints how many runs came out wrong, and the fences the compiler emitted (NVIDIA: the PTX).

    python benchmarks/splitk_race.py --device NVIDIA --shape 1000x999x997 --runs 300 \
        --config '{"MWG": 32, ...}'
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re

import pyopencl as cl

from octune.catalogue.registry import load_kernel
from octune.core.results import Status
from octune.kernels.gemm import parse_gemm
from octune.tuner.device import select_device
from octune.tuner.measure import DeviceRunner

#: Each variant's edits of the template: the hand-off as shipped, and with OpenCL C 1.2's
#: work-group fence in place of the device-scope one (what gemm.cl had before).
VARIANTS: dict[str, tuple[tuple[str, str], ...]] = {
    "as shipped": (),
    "work-group fence": (("#ifdef cl_nv_pragma_unroll", "#if 0"),),
}


def fences(program: cl.Program) -> list[str]:
    """The fence, barrier and atomic lines of the program's binary, where it is text (PTX)."""
    found = []
    for binary in program.get_info(cl.program_info.BINARIES):
        text = bytes(binary).decode("latin-1")
        if ".entry" not in text:
            continue
        found += [line.strip() for line in text.splitlines()
                  if re.search(r"\b(membar|fence|bar\.sync|barrier|atom)", line)]  # fmt: skip
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--shape", type=parse_gemm, required=True)
    parser.add_argument("--config", action="append", required=True, help="JSON; repeatable")
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    device = select_device(args.device)
    print(device.name, device.version, device.opencl_c_version)
    try:
        print("OpenCL C features:", " ".join(f.name for f in device.opencl_c_features))
    except (cl.Error, AttributeError) as error:
        print("OpenCL C features: ?", error)
    serial = load_kernel("gemm_splitk_serial")
    for name, edits in VARIANTS.items():
        source = serial.source
        for old, new in edits:
            assert old in source, (name, old)
            source = source.replace(old, new)
        kernel = dataclasses.replace(serial, source=source)
        runner = DeviceRunner(device, kernel, args.shape, seed=1, repeats=1, min_repeats=1)
        for text in args.config:
            config = json.loads(text)
            try:
                program = runner.build(kernel.build_options(config, args.shape))
            except cl.Error as error:
                print(f"{name}: build failed: {str(error).splitlines()[0][:300]}")
                break
            statuses: dict[str, int] = {}
            times = []
            for _ in range(args.runs):
                result = runner.measure(config)
                statuses[result.status.value] = statuses.get(result.status.value, 0) + 1
                if result.status is Status.OK:
                    times.append(result.times_s[0])
            times.sort()
            median = times[len(times) // 2] * 1e6 if times else float("nan")
            what = f"KSPLIT {config['KSPLIT']} KWG {config['KWG']} KDIMC {config['KDIMC']}"
            print(f"{name} | {what} | {statuses} | median {median:.1f} us", flush=True)
        else:
            print(f"{name} fences:", sorted(set(fences(program)))[:20])


if __name__ == "__main__":
    main()
