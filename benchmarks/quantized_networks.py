"""Statically quantized networks (onnxruntime's quantizer after its pre-processing, which
fuses batch-norms into convs as its documentation asks; QDQ: int8 weights per channel, uint8
activations, calibrated on random inputs) through `octune run`, beside onnxruntime's
int8 on the same file and both on the float32 model, in one run on this machine's CPU.

Each file is tuned first for the same time (`octune tune --model FILE --time T`: the QDQ file's
quantized layers in int8, the float32 file's in float32), then both run with the tuned configs,
each checked layer by layer against onnxruntime (the QDQ one within its quanta) and timed
(best wall of --repeat passes).

    .venv/bin/python benchmarks/quantized_networks.py --nets resnet18 mobilenet_v2 \\
        --seconds 120 --db sqlite:////tmp/qn.db --out /tmp/qn.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from octune.db.store import Store
from octune.networks.layers import load_model
from octune.runtime.config_sources import StoreConfigs
from octune.runtime.executor import Runtime
from octune.runtime.verify import check, onnxruntime_seconds, random_inputs
from octune.tuner.device import DeviceInfo, select_device


def quantized_file(net: str, folder: Path) -> tuple[Path, Path]:
    """The built-in network as a float32 file and its QDQ quantization (made once in
    ``folder``: a GPU machine whose onnxruntime has no quantizer is given them).
    """
    plain, quantized = folder / f"{net}.onnx", folder / f"{net}.qdq.onnx"
    model = load_model(net, 1)  # a built-in network's weights are seeded: the same each time
    onnx.save(model, plain)
    if quantized.is_file():
        return plain, quantized
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class RandomBatches(CalibrationDataReader):
        def __init__(self, name: str, shape: tuple[int, ...], count: int = 8) -> None:
            rng = np.random.default_rng(0)
            self.batches = iter([{name: rng.standard_normal(shape, np.float32)}
                                 for _ in range(count)])  # fmt: skip

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.batches, None)

    prepared = folder / f"{net}.prepared.onnx"
    quant_pre_process(plain, prepared, skip_symbolic_shape=True)
    (value,) = [
        v for v in model.graph.input if v.name not in {t.name for t in model.graph.initializer}
    ]
    shape = tuple(d.dim_value for d in value.type.tensor_type.shape.dim)
    reader = RandomBatches(value.name, shape)
    quantize_static(prepared, quantized, reader, quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)  # fmt: skip
    return plain, quantized


def measured(path: Path, args: argparse.Namespace) -> dict[str, Any]:
    device = select_device(args.device)
    model = load_model(path)
    with Store(args.db) as store:
        runtime = Runtime(model, device, StoreConfigs(store, DeviceInfo.from_cl(device)))
    inputs = random_inputs(runtime, 0)
    (output,) = check(runtime, inputs)
    return {
        "octune_s": runtime.time(args.repeat).wall_s,
        "onnxruntime_s": onnxruntime_seconds(model, inputs, args.repeat),
        "max_error": output.error / (output.magnitude or 1),
        # A quantized output against onnxruntime's whole model (its own integer kernels).
        "whole_model_error": (output.whole_model_error or 0.0) / (output.magnitude or 1),
        "launches": runtime.launches,
        "kernels": sorted({planned.kernel for planned in runtime.plan if planned.match != "-"}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nets", nargs="+", default=["resnet18", "mobilenet_v2"])
    parser.add_argument("--device", default=None)
    parser.add_argument("--seconds", type=int, default=120, help="tuning time per network")
    parser.add_argument("--db", default="sqlite:///quantized_networks.db")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("quantized_networks.json"))
    parser.add_argument(
        "--files",
        type=Path,
        default=None,
        help="a folder to keep the quantized files in (made where missing)",
    )
    args = parser.parse_args()
    results: dict[str, Any] = {"device": DeviceInfo.from_cl(select_device(args.device)).name}
    with tempfile.TemporaryDirectory() as temporary:
        folder = args.files or Path(temporary)
        folder.mkdir(parents=True, exist_ok=True)
        for net in args.nets:
            plain, quantized = quantized_file(net, folder)
            for path in (plain, quantized) if args.seconds else ():
                command = [sys.executable, "-m", "octune", "tune", "--model", str(path),
                           "--time", f"{args.seconds}s", "--db", args.db]  # fmt: skip
                if args.device:
                    command += ["--device", args.device]
                subprocess.run(command, check=True, capture_output=True)
            row = {"float32": measured(plain, args), "qdq": measured(quantized, args)}
            results[net] = row
            args.out.write_text(json.dumps(results, indent=2))
            f32, q = row["float32"], row["qdq"]
            print(f"{net}: octune QDQ {q['octune_s'] * 1e3:.2f} ms, onnxruntime int8 "
                  f"{q['onnxruntime_s'] * 1e3:.2f} ms ({q['octune_s'] / q['onnxruntime_s']:.2f} x);"
                  f" float32: octune {f32['octune_s'] * 1e3:.2f} ms, onnxruntime "
                  f"{f32['onnxruntime_s'] * 1e3:.2f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
