"""Every conv2d kernel computes PyTorch's conv2d for sampled legal configs on awkward layers:
odd sizes that no tile divides, batches, groups, strides, dilation, padding, 7x7 filters.
Measured as the tuner measures (DeviceRunner: NaN-poisoned output, float64 reference).
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pytest

from octune.kernels.conv2d import FAMILY, conv2d_reference
from octune.tuner.cost_model import Context, Features
from octune.tuner.device import DeviceInfo
from octune.tuner.kernels import KernelSpec, kernels_of, load_kernel
from octune.tuner.measure import DeviceRunner
from octune.tuner.results import Status

LAYERS = {
    "grouped, dilated, strided, batch 2": dict(n=2, c=6, h=17, w=19, k=10, r=3, s=5, stride=2,
                                               pad=2, dilation=2, groups=2),
    "7x7 stride 2 on 3 channels": dict(n=1, c=3, h=23, w=21, k=8, r=7, s=7, stride=2, pad=3),
    "3x3 pad 1": dict(n=1, c=16, h=15, w=13, k=24, r=3, s=3, pad=1),
    "pointwise": dict(n=1, c=16, h=9, w=11, k=24, r=1, s=1),
    "pointwise stride 2": dict(n=1, c=20, h=15, w=13, k=36, r=1, s=1, stride=2),
    "depthwise stride 2, batch 2": dict(n=2, c=12, h=13, w=10, k=12, r=3, s=3, stride=2, pad=1,
                                        groups=12),
    "depthwise on 1x1 pixels": dict(n=1, c=8, h=1, w=1, k=8, r=3, s=3, pad=1, groups=8),
}  # fmt: skip
CONFIGS_PER_LAYER = 2


def cases() -> list[tuple[str, str]]:
    return [
        (kernel, layer)
        for kernel in kernels_of("conv2d")
        for layer, shape in LAYERS.items()
        if load_kernel(kernel).takes(FAMILY.workload(shape)) is None
    ]


def test_every_conv2d_kernel_is_exercised_and_every_layer_has_a_kernel() -> None:
    covered = cases()
    assert {kernel for kernel, _ in covered} == set(kernels_of("conv2d"))
    assert {layer for _, layer in covered} == set(LAYERS)
    assert {"conv2d_direct", "conv2d_depthwise", "conv2d_1x1", "conv2d_igemm"} <= set(
        kernels_of("conv2d")
    )


@pytest.mark.parametrize(("kernel_name", "layer"), cases())
def test_sampled_configs_match_the_float64_reference(
    cl_device: cl.Device, device_info: DeviceInfo, kernel_name: str, layer: str
) -> None:
    kernel: KernelSpec = load_kernel(kernel_name)
    workload = FAMILY.workload(LAYERS[layer])
    table = kernel.space.enumerate(device_info.limits)
    rows = np.random.default_rng(len(layer)).choice(len(table), CONFIGS_PER_LAYER, replace=False)
    runner = DeviceRunner(cl_device, kernel, workload, seed=3, repeats=1, min_repeats=1)
    for row in rows:
        config = table.config(int(row))
        measurement = runner.measure(config)
        assert measurement.status is Status.OK, (config, measurement.message)
        assert measurement.max_error is not None and measurement.max_error < 1.0


def test_reference_matches_a_direct_sum() -> None:
    """The float64 reference itself, against the definition written out as loops."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 6, 5))
    w = rng.standard_normal((6, 2, 3, 2))
    stride, pad, dilation, groups = 2, 1, 2, 2
    out = conv2d_reference(x, w, stride, pad, dilation, groups)
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    expected = np.zeros_like(out)
    for n, k, i, j in np.ndindex(*out.shape):
        g = k // (w.shape[0] // groups)
        for c, r, s in np.ndindex(*w.shape[1:]):
            row, col = i * stride + r * dilation, j * stride + s * dilation
            expected[n, k, i, j] += padded[n, g * w.shape[1] + c, row, col] * w[k, c, r, s]
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


def test_cost_model_sees_every_conv2d_kernels_launch(device_info: DeviceInfo) -> None:
    """Launch columns come from the family's derived variables (OH, OW) and literal local
    sizes, for every kernel: none may be unknown, or the model would not see the geometry.
    """
    layer = FAMILY.workload(LAYERS["3x3 pad 1"])
    context = Context(device_info.to_dict(), layer.shape)
    for name in kernels_of("conv2d"):
        space = load_kernel(name).space
        features = Features(space)
        table = space.enumerate(device_info.limits)
        x = features.matrix(table.values[:50], context)
        launch = [i for i, n in enumerate(features.names) if n.startswith(("groups", "local_"))]
        assert np.isfinite(x[:, launch]).all(), name
        assert np.isfinite(x[:, features.names.index("shape_oh")]).all(), name
