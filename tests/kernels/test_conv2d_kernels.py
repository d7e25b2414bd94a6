"""Every conv2d kernel computes PyTorch's conv2d for sampled legal configs on awkward layers, in
each layout it takes: odd sizes that no tile divides, batches, groups, strides, dilation,
padding, 7x7 filters. Measured as the tuner measures (DeviceRunner: NaN-poisoned output,
float64 reference).
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pytest

from octune.catalogue.family import Workload
from octune.catalogue.registry import KernelSpec, kernels_of, load_kernel
from octune.core.results import Status
from octune.kernels.conv2d import FAMILY, conv2d_reference
from octune.tuner.cost_model import Context, Features
from octune.tuner.device import DeviceInfo
from octune.tuner.measure import DeviceRunner

pytestmark = pytest.mark.slow

LAYERS = {
    "grouped, dilated, strided, batch 2": dict(n=2, c=6, h=17, w=19, k=10, r=3, s=5, stride=2,
                                               pad=2, dilation=2, groups=2),
    "7x7 stride 2 on 3 channels": dict(n=1, c=3, h=23, w=21, k=8, r=7, s=7, stride=2, pad=3),
    "3x3 pad 1": dict(n=1, c=16, h=15, w=13, k=24, r=3, s=3, pad=1),
    # DeepLab's atrous 3x3: output rows 3 apart pair up in Winograd's tiles, some alone.
    "3x3 dilation 3, batch 2": dict(n=2, c=5, h=13, w=11, k=12, r=3, s=3, pad=3, dilation=3),
    "pointwise": dict(n=1, c=16, h=9, w=11, k=24, r=1, s=1),
    # Wider than any tile in channels and pixels: interior tiles (vector stores) and edges.
    "pointwise, batch 3": dict(n=3, c=12, h=11, w=13, k=136, r=1, s=1),
    "pointwise stride 2": dict(n=1, c=20, h=15, w=13, k=36, r=1, s=1, stride=2),
    "depthwise stride 2, batch 2": dict(n=2, c=12, h=13, w=10, k=12, r=3, s=3, stride=2, pad=1,
                                        groups=12),
    "depthwise on 1x1 pixels": dict(n=1, c=8, h=1, w=1, k=8, r=3, s=3, pad=1, groups=8),
    # EfficientNet's, ConvNeXt's and DeepLab's depthwise filters: 5x5, 7x7, dilated 3x3.
    "depthwise 5x5 stride 2, batch 2": dict(n=2, c=12, h=13, w=11, k=12, r=5, s=5, stride=2,
                                            pad=2, groups=12),
    "depthwise 7x7": dict(n=1, c=8, h=10, w=9, k=8, r=7, s=7, pad=3, groups=8),
    "depthwise 3x3 dilation 2": dict(n=1, c=8, h=12, w=15, k=8, r=3, s=3, pad=2, dilation=2,
                                     groups=8),
}  # fmt: skip
LAYOUTS = {"NCHW": 0, "NHWC": 1}
CONFIGS_PER_LAYER = 2


def layer_workload(layer: str, layout: str, dtype: str = "float32") -> Workload:
    return FAMILY.workload({**LAYERS[layer], "nhwc": LAYOUTS[layout]}, dtype)


def kernel_workload(kernel: str, layer: str, layout: str) -> Workload:
    """The layer in the element type the kernel computes (float16 kernels: half storage)."""
    return layer_workload(layer, layout, load_kernel(kernel).space.dtype)


def cases() -> list[tuple[str, str, str]]:
    return [
        (kernel, layer, layout)
        for kernel in kernels_of("conv2d")
        for layer in LAYERS
        for layout in LAYOUTS
        if load_kernel(kernel).takes(kernel_workload(kernel, layer, layout)) is None
    ]


def test_every_conv2d_kernel_is_exercised_and_every_layer_has_a_kernel_in_each_layout() -> None:
    covered = cases()
    assert {kernel for kernel, _, _ in covered} == set(kernels_of("conv2d"))
    assert {(layer, layout) for _, layer, layout in covered} == {
        (layer, layout) for layer in LAYERS for layout in LAYOUTS
    }
    nhwc = {"conv2d_igemm_nhwc", "conv2d_depthwise_nhwc", "conv2d_1x1_nhwc"}
    nchw = {
        "conv2d_direct",
        "conv2d_depthwise",
        "conv2d_1x1",
        "conv2d_igemm",
        "conv2d_winograd",
        "conv2d_panel",
        "conv2d_depthwise_rows",
    }
    assert nhwc | nchw <= set(kernels_of("conv2d"))
    # Each kernel takes one layout; the NHWC ones and the batched pointwise one each meet a
    # batch > 1, and those that take strides a stride 2.
    assert all(("_nhwc" in kernel) == (layout == "NHWC") for kernel, _, layout in covered)
    for kernel in nhwc | {"conv2d_1x1"}:
        shapes = [LAYERS[layer] for name, layer, _ in covered if name == kernel]
        assert any(shape["n"] > 1 for shape in shapes), kernel
        assert "1x1" in kernel or any(shape.get("stride") == 2 for shape in shapes)


def check_configs(
    device: cl.Device, kernel: KernelSpec, workload: Workload, configs: list[dict[str, int]]
) -> None:
    runner = DeviceRunner(device, kernel, workload, seed=3, repeats=1, min_repeats=1)
    for config in configs:
        measurement = runner.measure(config)
        assert measurement.status is Status.OK, (config, measurement.message)
        assert measurement.max_error is not None and measurement.max_error < 1.0


@pytest.mark.parametrize(("kernel_name", "layer", "layout"), cases())
def test_sampled_configs_match_the_float64_reference(
    cl_device: cl.Device, device_info: DeviceInfo, kernel_name: str, layer: str, layout: str
) -> None:
    kernel = load_kernel(kernel_name)
    table = kernel.space.enumerate(device_info.limits)
    rows = np.random.default_rng(len(layer)).choice(len(table), CONFIGS_PER_LAYER, replace=False)
    configs = [table.config(int(row)) for row in rows]
    check_configs(cl_device, kernel, kernel_workload(kernel_name, layer, layout), configs)


# NHWC kernels' vectors of channels, on layers whose channels the widest vector divides (aligned
# whole vectors) and does not (the element-by-element path): igemm's VWK runs over the 16 and 3
# channels per group, depthwise's VW over all 8 and 12 channels.
CHANNEL_VECTORS = [
    ("conv2d_igemm_nhwc", "VWK", "3x3 pad 1"),
    ("conv2d_igemm_nhwc", "VWK", "grouped, dilated, strided, batch 2"),
    ("conv2d_depthwise_nhwc", "VW", "depthwise on 1x1 pixels"),
    ("conv2d_depthwise_nhwc", "VW", "depthwise stride 2, batch 2"),
    ("conv2d_depthwise_nhwc", "VW", "depthwise 5x5 stride 2, batch 2"),
]


@pytest.mark.parametrize(("kernel_name", "width", "layer"), CHANNEL_VECTORS)
def test_nhwc_channel_vectors_whole_and_partial(
    cl_device: cl.Device, device_info: DeviceInfo, kernel_name: str, width: str, layer: str
) -> None:
    kernel = load_kernel(kernel_name)
    table = kernel.space.enumerate(device_info.limits)
    widths = table.column(width)
    widest = np.flatnonzero(widths == widths.max())
    rows = np.random.default_rng(len(layer)).choice(widest, CONFIGS_PER_LAYER, replace=False)
    configs = [table.config(int(row)) for row in rows]
    check_configs(cl_device, kernel, layer_workload(layer, "NHWC"), configs)


@pytest.mark.parametrize("kernel_name", ["conv2d_igemm", "conv2d_igemm_nhwc"])
def test_igemm_tiles_run_from_one_image_into_the_next(
    cl_device: cl.Device, device_info: DeviceInfo, kernel_name: str
) -> None:
    """Pixel tiles wider than an image's 24 pixels, stored as whole vectors (24 is a multiple
    of every vector width, 64 channels fill every channel tile up to 64) and element by
    element at the last tile's edge.
    """
    kernel = load_kernel(kernel_name)
    table = kernel.space.enumerate(device_info.limits)
    store = "VWN" if kernel_name == "conv2d_igemm" else "VWM"
    columns = table.column("NWG") >= 32, table.column("MWG") <= 64, table.column(store) >= 2
    wide = np.flatnonzero(np.logical_and.reduce(columns))
    rows = np.random.default_rng(7).choice(wide, 4, replace=False)
    layer = dict(n=3, c=8, h=4, w=6, k=64, r=3, s=3, pad=1)
    workload = FAMILY.workload({**layer, "nhwc": int(kernel_name.endswith("_nhwc"))})
    check_configs(cl_device, kernel, workload, [table.config(int(row)) for row in rows])


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


def test_nhwc_reference_is_the_nchw_one_channels_last(
    cl_device: cl.Device, device_info: DeviceInfo
) -> None:
    """x N x H x W x C and the filter K x R x S x C/groups in, y N x OH x OW x K out; and an
    NHWC workload's bound data is laid out so.
    """
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 6, 7, 5))  # NCHW
    w = rng.standard_normal((4, 3, 3, 2))  # K x C/groups x R x S, groups 2
    geometry = (2, 1, 2, 2)  # stride, pad, dilation, groups
    nchw = conv2d_reference(x, w, *geometry)
    nhwc = conv2d_reference(x.transpose(0, 2, 3, 1), w.transpose(0, 2, 3, 1), *geometry, nhwc=True)
    np.testing.assert_array_equal(nhwc, nchw.transpose(0, 2, 3, 1))

    workload = layer_workload("grouped, dilated, strided, batch 2", "NHWC")
    v = workload.shape_vars()
    context = cl.Context([cl_device])
    queue = cl.CommandQueue(context)
    bound = FAMILY.bind(workload, "conv2d_igemm_nhwc", context, queue, np.random.default_rng(0))
    assert bound.expected.shape == (v["N"], v["OH"], v["OW"], v["K"])


def test_cost_model_sees_every_conv2d_kernels_launch(device_info: DeviceInfo) -> None:
    """Launch columns come from the family's derived variables (OH, OW) and literal local
    sizes, for every kernel: none may be unknown, or the model would not see the geometry.
    """
    for layout in LAYOUTS:
        layer = layer_workload("3x3 pad 1", layout)
        context = Context(device_info.to_dict(), layer.shape)
        for name in kernels_of("conv2d"):
            space = load_kernel(name).space
            features = Features(space)
            table = space.enumerate(device_info.limits)
            x = features.matrix(table.values[:50], context)
            launch = [i for i, n in enumerate(features.names) if n.startswith(("groups", "local_"))]
            assert np.isfinite(x[:, launch]).all(), name
            assert np.isfinite(x[:, features.names.index("shape_oh")]).all(), name
