"""The runtime's eventless stream: OpenCL's own enqueue found, the same outputs as pyopencl's
enqueues bit for bit, and a launch the driver refuses named by its layer.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pyopencl as cl
import pytest
from helpers.networks_testing import residual

from octune.core.errors import OctuneError
from octune.networks.graph import GraphBuilder
from octune.networks.layers import load_model
from octune.runtime.executor import Runtime
from octune.runtime.stream import BoundLaunch, Stream, _enqueue_function
from octune.runtime.verify import random_inputs


def test_the_stream_calls_opencl_itself() -> None:
    # The fallback through pyopencl is for a loader that cannot be found; a test machine has one.
    assert _enqueue_function() is not None


def test_a_pass_through_the_stream_equals_one_through_pyopencl(cl_device, tmp_path: Path) -> None:
    g = GraphBuilder("residual", seed=3)
    output, shape = residual(g)
    onnx.save(g.model(output, shape), tmp_path / "model.onnx")
    runtime = Runtime(load_model(tmp_path / "model.onnx"), cl_device)
    (name,) = runtime.graph.outputs
    runtime.run(random_inputs(runtime))
    through_stream = runtime.read(name)
    # Poisoned, so that a pass that enqueued nothing could not pass.
    buffer = runtime.buffers[name]
    cl.enqueue_fill_buffer(runtime.queue, buffer, np.float32(np.nan), 0, buffer.size)
    runtime.stream.enqueue_with_events(runtime.queue)
    through_pyopencl = runtime.read(name)
    assert np.isfinite(through_stream).all() and np.abs(through_stream).max() > 0
    assert np.array_equal(through_stream, through_pyopencl)
    # The way a stream goes where it finds no OpenCL loader to call.
    cl.enqueue_fill_buffer(runtime.queue, buffer, np.float32(np.nan), 0, buffer.size)
    launches = [(p.step.name, launch) for p in runtime.plan for launch in p.launches]
    Stream(launches, direct=False).enqueue(runtime.queue)
    assert np.array_equal(runtime.read(name), through_stream)


def test_a_launch_the_driver_refuses_names_its_layer(cl_device) -> None:
    context = cl.Context([cl_device])
    queue = cl.CommandQueue(context)
    source = "__kernel void k(__global float *x) { x[get_global_id(0)] = 1.0f; }"
    kernel = cl.Program(context, source).build().k
    kernel.set_args(cl.Buffer(context, cl.mem_flags.READ_WRITE, 4 * 64))
    # 48 work-items in groups of 32: the global size is not a multiple of the local size.
    stream = Stream([("fc7", BoundLaunch(kernel, (48,), (32,)))])
    with pytest.raises(OctuneError, match=r"layer 'fc7': enqueueing its kernel failed .*INVALID"):
        stream.enqueue(queue)
