"""float16 ONNX files as PyTorch writes them from a `.half()` model, through `octune run`: each
torchvision model (random weights) is put in half precision on the GPU, exported with the
TorchScript exporter (`dynamo=False`, opset 17, float16 inputs, weights and outputs), then run
by octune in the file's own dtype with its default configs, every layer checked against the
float32 twin of the file on onnxruntime's CPU provider.

    benchmarks/device_run.sh python3 benchmarks/half_export.py --device NVIDIA --out "$OUT/half"
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


def export(name: str, path: Path) -> None:
    import torch
    import torchvision

    model = getattr(torchvision.models, name)(weights=None).eval().cuda().half()
    x = torch.randn(1, 3, 224, 224, device="cuda", dtype=torch.float16)
    with torch.no_grad():
        torch.onnx.export(model, (x,), str(path), opset_version=17, dynamo=False,
                          input_names=["input"], output_names=["logits"])  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "mobilenet_v2"])
    parser.add_argument("--device", default=None)
    parser.add_argument("--out", type=Path, default=Path("half"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = {}
    for name in args.models:
        path = args.out / f"{name}.half.onnx"
        export(name, path)
        report = args.out / f"{name}.run.json"
        command = [sys.executable, "-m", "octune", "run", str(path), "--configs", "default",
                   "--repeat", "5", "--json", str(report)]  # fmt: skip
        if args.device:
            command += ["--device", args.device]
        done = subprocess.run(command, capture_output=True, text=True)
        print(done.stdout[-1500:], done.stderr[-1500:])
        results[name] = json.loads(report.read_text()) if done.returncode == 0 else done.stderr
        path.unlink()  # large; the run's JSON says what it held
    (args.out / "half_export.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
