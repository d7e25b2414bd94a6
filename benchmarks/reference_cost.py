"""What a conv layer's float64 reference costs the host before its first candidate is measured
(issue 63): ``conv2d_reference`` as the bind calls it (the result in float64, the tolerance's
magnitude in float32), beside the form it replaced (a product per image and tap, both in float64),
on layers given as N,C,H,W,K,R,S,STRIDE,PAD,DILATION.

    python3 benchmarks/reference_cost.py --layers 16,2048,28,28,256,3,3,1,12,12 --out cost.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from octune.kernels.conv2d import conv2d_reference


def per_image(x: np.ndarray, w: np.ndarray, stride: int, pad: int, dilation: int) -> np.ndarray:
    """The replaced form (one group): per tap, a product for each image of the batch."""
    n, _, h, width = x.shape
    k, c, r, s = w.shape
    oh = (h + 2 * pad - dilation * (r - 1) - 1) // stride + 1
    ow = (width + 2 * pad - dilation * (s - 1) - 1) // stride + 1
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    filters = w.astype(np.float64)
    out = np.zeros((n, k, oh * ow))
    for i in range(r):
        for j in range(s):
            rows = slice(i * dilation, i * dilation + stride * (oh - 1) + 1, stride)
            cols = slice(j * dilation, j * dilation + stride * (ow - 1) + 1, stride)
            out += filters[..., i, j] @ padded[:, :, rows, cols].reshape(n, c, oh * ow)
    return out.reshape(n, k, oh, ow)


def costs(x: np.ndarray, f: np.ndarray, stride: int, pad: int, dilation: int) -> dict:
    """Seconds of each form, reference and magnitude, the faster of two runs."""
    geometry = (stride, pad, dilation, 1)
    forms = {
        "now_s": lambda: (
            conv2d_reference(x, f, *geometry),
            conv2d_reference(np.abs(x), np.abs(f), *geometry, dtype=np.float32),
        ),
        "before_s": lambda: (
            per_image(x, f, stride, pad, dilation),
            per_image(np.abs(x), np.abs(f), stride, pad, dilation),
        ),
    }
    seconds = {}
    for name, form in forms.items():
        runs = []
        for _ in range(2):
            started = time.perf_counter()
            form()
            runs.append(time.perf_counter() - started)
        seconds[name] = min(runs)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", nargs="+", required=True, help="N,C,H,W,K,R,S,STRIDE,PAD,DIL")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    for text in args.layers:
        n, c, h, w, k, r, s, stride, pad, dilation = map(int, text.split(","))
        x = rng.standard_normal((n, c, h, w), dtype=np.float32)
        f = rng.standard_normal((k, c, r, s), dtype=np.float32)
        seconds = costs(x, f, stride, pad, dilation)
        now, before = seconds["now_s"], seconds["before_s"]
        rows.append({"layer": text, "now_s": now, "before_s": before})
        print(f"{text}: reference and magnitude {now:.2f} s, before {before:.2f} s", flush=True)
    args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
