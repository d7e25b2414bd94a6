"""The runtime: a model's steps on one OpenCL device, as an inference runtime would use octune.

At load time it asks its config source once per kernel family for every distinct conv and GEMM
shape of the model, builds each kernel version once (through octune's program cache), uploads
the weights, allocates every tensor and sets every launch's arguments; a forward pass then only
enqueues launches, back to back.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import replace
from functools import partial

import numpy as np
import onnx
import pyopencl as cl

from octune.catalogue.family import Workload
from octune.catalogue.registry import describe_shape
from octune.core.errors import OctuneError
from octune.core.precision import STORAGE, check_dtype
from octune.core.results import one_line_reason
from octune.runtime import attention as att
from octune.runtime import batched as bmm
from octune.runtime.commute import Commuter
from octune.runtime.config_sources import (
    Choice,
    ConfigSource,
    Policy,
    build_ahead,
    choose,
    confirm_candidates,
    default_configs,
    fastest,
)
from octune.runtime.fold import Folder, gap_offsets, live
from octune.runtime.onnx_loader import load_graph
from octune.runtime.operators import RESIZE_COORDINATES, RESIZE_NEAREST
from octune.runtime.ops_cl import (
    FUNCTIONS,
    MODES,
    REDUCTIONS,
    epilogue_arguments,
    epilogue_defines,
    ops_source,
)
from octune.runtime.products import Products
from octune.runtime.steps import (
    Alias,
    Attention,
    Broadcast,
    Concat,
    ConvTranspose,
    Elementwise,
    Graph,
    IndexMap,
    LayerNorm,
    Pool,
    Reduce,
    Resize,
    Softmax,
    Step,
    Tuned,
)
from octune.runtime.stream import BoundLaunch, Planned, Stream, Timing
from octune.runtime.views import Viewer
from octune.tuner.device import DeviceInfo
from octune.tuner.programs import ProgramCache
from octune.tuner.tuning_store import TuningStore

#: Work-items a row of the runtime's row kernels (softmax, layer norm, global pooling).
LOCAL = 64
#: Work-items a group, at most, of its kernels of one output element a work-item: on an H200 a
#: copy in groups of 64 moved 0.8 TB/s, in groups of 256 2.2 (benchmarks/epilogue_bandwidth.py).
ELEMENTS = 256


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


class Runtime(Products):
    """A model loaded onto a device with configs from ``configs`` under ``policy``; without a
    source (or with policy ``default``), octune's default configs; what policy ``confirmed``
    measures at load is kept in ``record`` where given. A layer's epilogue runs in
    its kernel's stores where the kernel's template allows it with ``fuse``, in a launch of its
    own without (to compare, or to rule a fused store out), and by default, for a conv or GEMM,
    whichever of the two ran faster here at load: the stores' extra code slowed ViT-B/16's
    GEMMs on the H200 by more than the launches apart cost (benchmarks/results/networks.md),
    where fusing pays on launch-bound networks. ``dtype`` float16 stores
    every tensor and weight in half precision and runs each conv and GEMM with its float16
    kernel (arithmetic in float, or in half where the tuned config says so); the host's
    inputs and outputs stay float32.
    """

    def __init__(
        self,
        model: onnx.ModelProto,
        device: cl.Device,
        configs: ConfigSource | None = None,
        policy: Policy = "tuned",
        cache: ProgramCache | None = None,
        fuse: bool | None = None,
        dtype: str | None = None,
        batched: str | None = None,
        attention: str | None = None,
        record: TuningStore | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.model = model
        #: Where a first-use confirmation keeps what it measured (``config_sources``).
        self.record = record
        #: Told, as a load goes, what it is doing: a first-use confirmation at batch 16 can
        #: take minutes (``octune run`` shows it on its status line).
        self.progress = progress or (lambda _: None)
        self.fuse = fuse
        if batched not in (None, *bmm.BATCHED_PLANS):
            raise OctuneError(f"batched is one of {', '.join(bmm.BATCHED_PLANS)} or None")
        #: How a batched MatMul runs (``runtime/batched.py``): by this plan where the layer
        #: takes it, else (and where None) by whichever of its plans ran fastest here at load.
        self.batched = batched
        if attention not in (None, *att.ATTENTION_PLANS):
            raise OctuneError(f"attention is one of {', '.join(att.ATTENTION_PLANS)} or None")
        #: How attention's products and softmax run (``runtime/attention.py``): likewise; a
        #: batched plan named alone leaves them three steps, the products run by that plan.
        self.attention = attention
        self.graph: Graph = load_graph(model)
        if batched != "per-matrix":  # row moves where the products' views take them
            self.graph.steps = Commuter(self.graph).commute()
        #: What every tensor and weight is stored as on the device (``precision.STORAGE``):
        #: ``dtype``, else the model's own (a float16 file runs in float16).
        self.dtype = check_dtype(dtype or self.graph.dtype)
        if self.dtype not in STORAGE:
            raise OctuneError(
                f"octune run stores tensors as {' or '.join(STORAGE)}, not {self.dtype}: "
                "a quantized model (QDQ or QOperator) runs as its file is written"
            )
        self.storage = np.dtype(STORAGE[self.dtype])
        self.device = device
        self.info = DeviceInfo.from_cl(device)
        self.context = cl.Context([device])
        # No profiling in the queue that runs the model: on NVIDIA's OpenCL it doubles the
        # per-launch cost of a stream of short kernels (benchmarks/RESULTS.md, launch cost).
        self.queue = cl.CommandQueue(self.context)
        self.cache = cache or ProgramCache()
        self._programs: dict[tuple[str, tuple[str, ...]], cl.Program] = {}
        self._plans: dict[Hashable, str] = {}
        source = configs if configs is not None and policy != "default" else None
        self.choices = self._choose(source or default_configs(self.info), policy)
        self.buffers: dict[str, cl.Buffer] = {}
        # Buffers only kernel arguments refer to (axes, workspaces, sub-buffers): OpenCL does
        # not keep a kernel argument alive, and a freed one crashes NVIDIA's driver.
        self._held: list[cl.MemoryObject] = []
        self._in_place: set[str] = set()  # Concat outputs whose inputs write into them
        # Gapped Concat outputs (and their Reshapes): where each input's elements lie.
        self._gapped: dict[str, tuple[tuple[int, int], ...]] = {}
        self.steps: list[Step] = self.graph.steps
        self._allocate()
        self.plan = self._pair_index_maps([self._plan(step) for step in self.steps])
        self.stream = Stream([(p.step.name, la) for p in self.plan for la in p.launches])

    # --- configs --------------------------------------------------------------------------

    def _choose(self, source: ConfigSource, policy: Policy) -> dict[str, Choice]:
        """One lookup per family and dtype for the model's distinct shapes; each tuned step's
        choice.
        """
        tuned = [step for step in self.graph.steps if isinstance(step, Tuned)]
        choices: dict[str, Choice] = {}
        for family, dtype in dict.fromkeys((s.layer.family, self._dtype(s)) for s in tuned):
            steps = [s for s in tuned if (s.layer.family, self._dtype(s)) == (family, dtype)]
            distinct = {tuple(s.layer.shape.items()): s.layer for s in steps}
            layers = list(distinct.values())
            answers = source.answers(family, [layer.shape for layer in layers], dtype)
            workloads = [layer.workload(dtype) for layer in layers]
            chosen = choose(source, workloads, answers, policy, self.info.limits)
            if policy == "confirmed":
                chosen = self._confirmed(source, family, workloads, chosen)
            by_shape = dict(zip(distinct, chosen, strict=True))
            choices.update({s.name: by_shape[tuple(s.layer.shape.items())] for s in steps})
        return choices

    def _confirmed(
        self,
        source: ConfigSource,
        family: str,
        workloads: Sequence[Workload],
        chosen: Sequence[Choice],
    ) -> list[Choice]:
        """``confirm`` for each layer not tuned at its own shape, every layer's candidates
        built ahead at once.
        """
        pending = [i for i, choice in enumerate(chosen) if choice.match != "exact"]
        layers = [(workloads[i], confirm_candidates(source, family, workloads[i], chosen[i],
                                                    device=self.info))
                  for i in pending]  # fmt: skip
        if not layers:
            return list(chosen)
        count = sum(len(candidates) for _, candidates in layers)
        self.progress(f"building {count} candidates for {len(layers)} untuned {family} layers")
        build_ahead(layers, self.device, self.cache)
        confirmed = list(chosen)
        for done, (i, (workload, candidates)) in enumerate(zip(pending, layers, strict=True)):
            shape = describe_shape(family, workload.shape, family)
            self.progress(f"confirming {family} layer {done + 1} of {len(layers)} ({shape}): "
                          f"{len(candidates)} candidates")  # fmt: skip
            found = fastest(candidates, workload, self.device, self.cache, self.record)
            confirmed[i] = found or chosen[i]
        return confirmed

    def _dtype(self, step: Tuned) -> str:
        """What a tuned step computes in: int8 for an int8 layer, else the run's storage."""
        return "int8" if step.layer.dtype == "int8" else self.dtype

    def _type(self, name: str) -> np.dtype:
        """A tensor's or constant's element type on the device (``Graph.typed``)."""
        typed = self.graph.typed.get(name)
        return self.storage if typed is None else np.dtype(typed)

    # --- memory ---------------------------------------------------------------------------

    def _allocate(self) -> None:
        graph, flags = self.graph, cl.mem_flags
        used = {name for step in graph.steps for name in step.reads}
        self._check_memory(used & graph.constants.keys())
        for name in sorted(used & graph.constants.keys()):
            value = np.ascontiguousarray(graph.constants[name], dtype=self._type(name))
            self.buffers[name] = cl.Buffer(
                self.context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=value
            )
        for name in graph.inputs:
            self.buffers[name] = self._tensor_buffer(name)
        self._place_concat_inputs()
        self.steps = self._fold()
        if self.batched != "per-matrix":  # whose sub-buffers need each matrix where it lies
            self.steps = Viewer(self.graph, self._gapped).views(self.steps)
        if self.attention is not None or self.batched is None:
            self.steps = att.fuse(self.graph, self.steps, epilogues=self.fuse is not False)
        for step in self.steps:
            if isinstance(step, Alias):
                self.buffers[step.output] = self.buffers[step.inputs[0]]
                if step.inputs[0] in self._gapped:
                    self._gapped[step.output] = self._gapped[step.inputs[0]]
            elif step.output not in self.buffers:
                self.buffers[step.output] = self._tensor_buffer(step.output)

    def _concats(self) -> list[Concat]:
        """Concats whose inputs could write into their output's buffer: along an axis with
        nothing before it, of distinct tensors each written by a step of its own.
        """
        graph = self.graph
        written = {  # not a batched MatMul's output: it is cut into sub-buffers of its own
            step.output
            for step in graph.steps
            if not isinstance(step, Alias | Tuned)
            or (isinstance(step, Tuned) and step.layer.count == 1)
        }
        fixed = {*graph.outputs, *graph.inputs}
        return [
            step
            for step in graph.steps
            if isinstance(step, Concat)
            and len(set(step.inputs)) == len(step.inputs)
            and math.prod(graph.shapes[step.output][: step.axis]) == 1
            and step.output not in fixed
            and all(name in written and name not in fixed for name in step.inputs)
            and not {step.output, *step.inputs} & graph.typed.keys()
        ]

    def _fold(self) -> list[Step]:
        """The steps with each index map reading from the start of its chain (``fold``), and
        the Concats that only such maps read laid out gapped, their inputs written in place.
        """
        folder, align = Folder(self.graph), self.device.mem_base_addr_align // 8
        size = self.storage.itemsize
        gapped: dict[str, tuple[int, ...]] = {}
        # A map's fold depends on its chain's start alone: a gapped Concat's readers keep the
        # fold their trial found.
        folded: dict[str, IndexMap | None] = {}
        for concat in self._concats():
            if concat.output in self.buffers or any(n in self.buffers for n in concat.inputs):
                continue
            readers = folder.readers(concat.output)
            maps = [step for step in readers if isinstance(step, IndexMap)]
            if not readers or len(maps) != len(readers):
                continue
            trial = {**gapped, concat.output: gap_offsets(self.graph, concat, align, size)}
            reads = {step.output: folder.fold(step, trial) for step in maps}
            if all(reads.values()):
                gapped = trial
                folded.update(reads)
                self._gap(concat, trial[concat.output])
        steps = [
            (folded.get(step.output) or folder.fold(step, gapped) or step)
            if isinstance(step, IndexMap)
            else step
            for step in self.graph.steps
        ]
        return live(self.graph, steps)

    def _gap(self, concat: Concat, offsets: tuple[int, ...]) -> None:
        """A Concat's buffer with each input a sub-buffer at ``offsets`` (elements)."""
        item = self.storage.itemsize
        buffer = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, size=item * offsets[-1])
        self.buffers[concat.output] = buffer
        parts = []
        for name, start in zip(concat.inputs, offsets, strict=False):
            size = math.prod(self.graph.shapes[name])
            self.buffers[name] = self._hold(buffer.get_sub_region(item * start, item * size))
            parts.append((start, size))
        self._gapped[concat.output] = tuple(parts)
        self._in_place.add(concat.output)

    def _place_concat_inputs(self) -> None:
        """Concats whose inputs write straight into their output, so they cost no launch.

        Along an axis with nothing before it (channels at batch 1), a Concat's inputs are
        consecutive blocks of its output: where each input is written by a step of its own, at
        an offset the device can start a sub-buffer at, it is a sub-buffer of the output
        (GoogLeNet's and SqueezeNet's branches). A Concat whose inputs begin a wider one's is
        a sub-buffer of that one too: DenseNet concatenates every earlier layer's output
        again for each layer, so one buffer a block holds them all (597 copies at 224 px).
        """
        graph = self.graph
        concats = self._concats()
        align = self.device.mem_base_addr_align // 8
        for whole in sorted(concats, key=lambda step: len(step.inputs), reverse=True):
            offsets = [0]
            for name in whole.inputs:
                offsets.append(offsets[-1] + self.storage.itemsize * math.prod(graph.shapes[name]))
            if (
                whole.output in self.buffers
                or any(offset % align for offset in offsets[:-1])
                or any(name in self.buffers for name in whole.inputs)
            ):
                continue
            buffer = self._tensor_buffer(whole.output)
            self.buffers[whole.output] = buffer
            for name, start, end in zip(whole.inputs, offsets, offsets[1:], strict=False):
                self.buffers[name] = self._hold(buffer.get_sub_region(start, end - start))
            self._in_place.add(whole.output)
            for step in concats:
                count = len(step.inputs)
                if (
                    step.output not in self.buffers
                    and step.axis == whole.axis
                    and step.inputs == whole.inputs[:count]
                ):
                    self.buffers[step.output] = self._hold(buffer.get_sub_region(0, offsets[count]))
                    self._in_place.add(step.output)

    def _check_memory(self, constants: set[str]) -> None:
        """Refuse, before allocating anything, a model whose tensors the device cannot hold."""
        graph = self.graph
        tensors = [*graph.inputs, *(s.output for s in graph.steps if not isinstance(s, Alias))]
        sizes = {
            name: self._type(name).itemsize * math.prod(graph.shapes[name])
            for name in (*constants, *tensors)
        }
        largest = max(sizes, key=sizes.__getitem__, default=None)
        total, limit = sum(sizes.values()), self.device.global_mem_size
        if total > limit:
            raise OctuneError(
                f"{graph.name} needs {total / 2**30:.2f} GiB of tensors and weights, and "
                f"{self.info.name} has {limit / 2**30:.2f} GiB: give smaller inputs "
                "(--batch, --dim) or a device with more memory"
            )
        if largest is not None and sizes[largest] > self.device.max_mem_alloc_size:
            raise OctuneError(
                f"{graph.name}: tensor '{largest}' needs {sizes[largest] / 2**20:.0f} MiB, more "
                f"than the {self.device.max_mem_alloc_size / 2**20:.0f} MiB {self.info.name} "
                "allocates at once: give smaller inputs (--batch, --dim)"
            )

    def _tensor_buffer(self, name: str) -> cl.Buffer:
        size = self._type(name).itemsize * max(math.prod(self.graph.shapes[name]), 1)
        return cl.Buffer(self.context, cl.mem_flags.READ_WRITE, size=size)

    # --- programs and launches ------------------------------------------------------------

    def _build(self, step: Step, what: str, source: str, options: Sequence[str]) -> cl.Program:
        key = (source, tuple(options))
        program = self._programs.get(key)
        if program is None:
            try:
                program = self.cache.build(self.context, self.info.fingerprint, source, options)
            except cl.Error as error:
                raise OctuneError(
                    f"layer '{step.name}': building {what} failed on {self.info.name}: "
                    f"{one_line_reason(str(error))}"
                ) from None
            self._programs[key] = program
        return program

    def _ops(
        self,
        step: Step,
        name: str,
        args: Sequence[object],
        n: int,
        sizes: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
        **defines: int,
    ) -> BoundLaunch:
        """A launch of one of the runtime's own kernels over ``n`` work-items (or ``sizes``,
        its global and local sizes).
        """
        options = [f"-D{key}={value}" for key, value in defines.items()]
        if self.dtype != "float32":
            options.append(f"-DOCTUNE_{self.dtype.upper()}=1")
        program = self._build(step, f"the runtime's {name}", ops_source(), options)
        kernel = cl.Kernel(program, name)
        kernel.set_args(*args)
        if sizes is not None:
            return BoundLaunch(kernel, *sizes)
        local = 1 << (min(ELEMENTS, self._most_items(kernel)).bit_length() - 1)
        return BoundLaunch(kernel, (_round_up(max(n, 1), local),), (local,))

    def _rows(
        self, step: Step, name: str, args: Sequence[object], rows: int, **defines: int
    ) -> BoundLaunch:
        """A launch of one of the runtime's row kernels: a work-group of ``LOCAL`` a row."""
        sizes = ((rows * LOCAL,), (LOCAL,))
        return self._ops(step, name, args, 0, sizes, GROUP=LOCAL, **defines)

    def _most_items(self, kernel: cl.Kernel) -> int:
        """The most work-items a work-group of this built kernel may have on the device."""
        return kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, self.device)

    def _plan(self, step: Step) -> Planned:
        if isinstance(step, Tuned):
            return self._tuned(step) if step.layer.count == 1 else self._batched(step)
        if isinstance(step, Attention):
            return self._attention(step)
        if isinstance(step, Alias):
            return Planned(step, "-", "-", {}, ())
        if isinstance(step, Elementwise):
            return Planned(step, "epilogue", "-", {}, (self._epilogue(step, step.inputs[0]),))
        x, y = (self.buffers[name] for name in (step.inputs[0], step.output))
        shape = self.graph.shapes[step.output]
        n = math.prod(shape)
        launches: list[BoundLaunch] = []
        if isinstance(step, Pool) and step.global_over(self.graph.shapes[step.inputs[0]]):
            length = math.prod(self.graph.shapes[step.inputs[0]][2:])
            args = (x, y, np.int32(length))
            launches.append(self._rows(step, "global_pool", args, n, MAX=int(step.max)))
        elif isinstance(step, Pool):
            images, c, h, w = self.graph.shapes[step.inputs[0]]
            defines = dict(MAX=int(step.max), KH=step.kernel[0], KW=step.kernel[1],
                           SH=step.strides[0], SW=step.strides[1], PT=step.pads[0],
                           PL=step.pads[1], PB=step.pads[2], PR=step.pads[3],
                           INCLUDE_PAD=int(step.include_pad))  # fmt: skip
            sizes = (images * c, h, w, shape[2], shape[3])
            launches.append(self._ops(step, "pool", (x, y, *map(np.int32, sizes)), n, **defines))
        elif isinstance(step, Concat) and step.output in self._in_place:
            return Planned(step, "concat (in place)", "-", {}, ())
        elif isinstance(step, Concat):
            outer, offset = math.prod(shape[: step.axis]), 0
            for name in step.inputs:
                inner = math.prod(self.graph.shapes[name][step.axis :])
                sizes = (outer * inner, inner, n // outer, offset)
                args = (self.buffers[name], y, *map(np.int32, sizes))
                launches.append(self._ops(step, "concat", args, outer * inner))
                offset += inner
        elif isinstance(step, Softmax):
            args = (x, y, np.int32(step.length), np.int32(step.inner))
            launches.append(self._rows(step, "softmax", args, n // step.length))
        elif isinstance(step, LayerNorm):
            gamma, beta = (self.buffers[name] for name in step.inputs[1:3])
            args = (x, y, gamma, beta, np.int32(shape[-1]), np.float32(step.epsilon))
            launches.append(self._rows(step, "layer_norm", args, n // shape[-1]))
        elif isinstance(step, IndexMap):
            launches.append(self._index_map(step, x, y, n))
        elif isinstance(step, Broadcast):
            a, b, c = (*(self.buffers[name] for name in step.inputs), None, None)[:3]
            meta = self._meta(step.dims, *step.strides)
            args = (a, b, c, y, meta, np.int32(n))
            defines = dict(FUNCTION=FUNCTIONS[step.function], INPUTS=len(step.inputs))
            launches.append(self._ops(step, "broadcast", args, n, **defines))
        elif isinstance(step, Reduce):
            meta = self._meta(step.dims, step.strides, step.reduced)
            args = (x, y, meta, np.int32(n), np.int32(math.prod(step.reduced)))
            defines = dict(REDUCTION=REDUCTIONS[step.function])
            launches.append(self._ops(step, "reduce", args, n, **defines))
        elif isinstance(step, Resize):
            images, c, h, w = self.graph.shapes[step.inputs[0]]
            sizes = (images * c, h, w, shape[2], shape[3])
            args = (x, y, *map(np.int32, sizes), *map(np.float32, step.scales))
            defines = dict(LINEAR=int(step.linear),
                           COORDINATES=RESIZE_COORDINATES.index(step.coordinates),
                           NEAREST=RESIZE_NEAREST.index(step.nearest))  # fmt: skip
            launches.append(self._ops(step, "resize", args, n, **defines))
        elif isinstance(step, ConvTranspose):
            launches.append(self._conv_transpose(step, x, y, n))
        else:
            raise AssertionError(f"no plan for {type(step).__name__}")
        if not step.epilogue.empty and not self._fuses(step):
            launches.append(self._epilogue(step, step.output))
        return Planned(step, type(step).__name__.lower(), "-", {}, tuple(launches))

    def _pair_index_maps(self, plan: list[Planned]) -> list[Planned]:
        """Plain index maps (gathers too) of one input with as many elements each, two by two in
        one launch (ops.cl's ``index_map_pair``) at the first one's place: its input is ready
        there, and every tensor has a buffer of its own, so writing the second's output early
        clobbers nothing. ShuffleNet v2 splits each block's input so: 13 of its 89 GPU launches.
        """
        waiting: dict[tuple[str, int], int] = {}
        for i, planned in enumerate(plan):
            step = planned.step
            if not (isinstance(step, IndexMap) and step.mode == "plain" and step.epilogue.empty):
                continue
            key = (step.inputs[0], math.prod(self.graph.shapes[step.output]))
            first = waiting.pop(key, None)
            if first is None:
                waiting[key] = i
                continue
            other, n = plan[first].step, key[1]
            assert isinstance(other, IndexMap)
            outputs = (self.buffers[other.output], self.buffers[step.output])
            meta = self._meta(*other.axes, *step.axes)
            table = self._meta((*other.table, *step.table, 0))
            axes = (m.table_axis if m.table else -1 for m in (other, step))
            args = (self.buffers[step.inputs[0]], *outputs, meta, table,
                    *map(np.int32, (*axes, len(other.table), n)))  # fmt: skip
            launch = self._ops(
                other, "index_map_pair", args, 2 * n, MODE=MODES["plain"], TABLE=1, PAIR=1
            )
            plan[first] = replace(plan[first], kernel="index_map_pair", launches=(launch,))
            plan[i] = replace(planned, kernel=f"(in {other.name}'s index_map_pair)", launches=())
        return plan

    def _fuses(self, step: Step) -> bool:
        """Whether the step's own kernel of ops.cl runs its epilogue where it stores."""
        return self.fuse is not False and isinstance(step, IndexMap) and not step.epilogue.empty

    def _meta(self, *rows: Sequence[int]) -> cl.Buffer:
        """A shape-generic kernel's axes: RANK ints a row."""
        value = np.array([v for row in rows for v in row], dtype=np.int32)
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        return self._hold(cl.Buffer(self.context, flags, hostbuf=value))

    def _hold(self, buffer: cl.Buffer) -> cl.Buffer:
        """``buffer``, kept for the launches' lifetime."""
        self._held.append(buffer)
        return buffer

    def _index_map(self, step: IndexMap, x: cl.Buffer, y: cl.Buffer, n: int) -> BoundLaunch:
        meta = self._meta(*step.axes)
        table = self._meta(step.table or (0,))
        args = (x, y, meta, table, np.int32(step.table_axis), np.int32(n), np.float32(step.value))
        defines = dict(MODE=MODES[step.mode], TABLE=int(bool(step.table)))
        if self._fuses(step):
            args += epilogue_arguments(step.epilogue, self.buffers)
            defines.update(self._epilogue_defines(step))
        return self._ops(step, "index_map", args, n, **defines)

    def _conv_transpose(
        self, step: ConvTranspose, x: cl.Buffer, y: cl.Buffer, n: int
    ) -> BoundLaunch:
        images, c, h, w = self.graph.shapes[step.inputs[0]]
        _, k, oh, ow = self.graph.shapes[step.output]
        weight = self.buffers[step.inputs[1]]
        bias = self.buffers[step.inputs[2]] if len(step.inputs) > 2 else None
        args = (x, weight, bias, y, *map(np.int32, (images, c, h, w, k, oh, ow)))
        defines = dict(KH=step.kernel[0], KW=step.kernel[1], SH=step.strides[0],
                       SW=step.strides[1], PT=step.pads[0], PL=step.pads[1],
                       DH=step.dilations[0], DW=step.dilations[1], GROUPS=step.groups,
                       HAS_BIAS=int(bias is not None))  # fmt: skip
        return self._ops(step, "conv_transpose", args, n, **defines)

    def _epilogue_defines(self, step: Step) -> dict[str, int]:
        return epilogue_defines(step.epilogue, math.prod(self.graph.shapes[step.output]))

    def _epilogue_apart(self, step: Step) -> tuple[BoundLaunch, ...]:
        """The launch of the step's epilogue after its kernel (in place), if it has one."""
        return () if step.epilogue.empty else (self._epilogue(step, step.output),)

    def _epilogue(self, step: Step, source: str) -> BoundLaunch:
        """The step's epilogue as a launch of its own, over ``source`` into the step's output."""
        n = math.prod(self.graph.shapes[step.output])
        args = (self.buffers[source], self.buffers[step.output], np.int32(n),
                *epilogue_arguments(step.epilogue, self.buffers))  # fmt: skip
        # A quantized model's uint8 tensors: what a DequantizeLinear reads or a Quantize writes.
        ends = {f"{end}_BYTES": int(self._type(name) == np.uint8)
                for end, name in (("X", source), ("Y", step.output))}  # fmt: skip
        return self._ops(step, "epilogue", args, n, **self._epilogue_defines(step), **ends)

    def _tuned(self, step: Tuned, fuse: bool | None = None) -> Planned:
        """The layer's kernel and config; its epilogue in the kernel's stores or apart as
        ``fuse`` (else the runtime's ``fuse``) says, by the faster of the two where neither does.
        """
        choice = self.choices[step.name]
        spec, config = choice.kernel, choice.config
        workload = step.layer.workload(self._dtype(step))
        entry = spec.space.entry
        buffers = tuple(self.buffers[name] for name in (*step.inputs, step.output))
        operands = bmm.per_matrix_operands(buffers, step.layer.count, workload.extents,
                                       self.storage.itemsize, self._hold)  # fmt: skip
        # In the kernel's stores where its template fuses it and the output is one launch's
        # (a batched layer's launches each see a sub-buffer: their element numbers restart).
        fusable = not step.epilogue.empty and spec.fuses_epilogue and len(operands) == 1
        fuse = self.fuse if fuse is None else fuse
        if fusable and fuse is None:
            makers = {"fused": partial(self._tuned, step, True),
                      "apart": partial(self._tuned, step, False)}  # fmt: skip
            key = ("epilogue", spec.sha256, tuple(sorted(config.items())), workload.key,
                   self._epilogue_key(step))  # fmt: skip
            return self._fastest(step, makers, None, key)
        fused = fusable and bool(fuse)
        options = spec.build_options(config, workload)
        if fused:
            options += [f"-D{key}={value}" for key, value in self._epilogue_defines(step).items()]
        program = self._build(step, f"{spec.name} {config}", spec.source, options)
        epilogue = epilogue_arguments(step.epilogue, self.buffers) if fused else ()
        shape, limits = workload.shape_vars(), self.info.limits
        sizes = spec.space.launches(config, shape, limits)
        elements = spec.space.workspace_elements(config, shape, limits)
        # The batches run one after another: they share the workspace. Zero-filled once: a
        # kernel's counters there start at zero and every run leaves them so.
        workspace = []
        if elements:
            workspace.append(self._hold(cl.Buffer(self.context, cl.mem_flags.READ_WRITE,
                                                  4 * elements)))  # fmt: skip
            cl.enqueue_fill_buffer(self.queue, workspace[0], np.int32(0), 0, 4 * elements)
        # The family (a plug-in) says how its kernels take the buffers: none is named here.
        arguments = workload.family.launch_arguments(workload, entry, step.alpha, step.zeros)
        launches = []
        for inputs, output in operands:
            for size in sizes:
                kernel = cl.Kernel(program, size.entry)
                kernel.set_args(*arguments(inputs, output), *workspace, *epilogue)
                launches.append(BoundLaunch(kernel, size.global_size, size.local_size))
        for launch in launches[: len(sizes)]:
            allowed = self._most_items(launch.kernel)
            if math.prod(launch.local_size) > allowed:
                raise OctuneError(
                    f"layer '{step.name}': {spec.name} config {config} needs work-groups of "
                    f"{math.prod(launch.local_size)}, and {self.info.name} allows {allowed} for it"
                )
        if not step.epilogue.empty and not fused:
            launches.append(self._epilogue(step, step.output))
        return Planned(step, spec.name, choice.match, config, tuple(launches))

    # --- running --------------------------------------------------------------------------

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The model's outputs for these inputs (one array per graph input), as float32."""
        for name in self.graph.inputs:
            value = inputs.get(name)
            if value is None or value.shape != self.graph.shapes[name]:
                raise OctuneError(
                    f"input '{name}' must be a float32 array of shape {self.graph.shapes[name]}"
                )
            stored = np.ascontiguousarray(value, self.storage)
            cl.enqueue_copy(self.queue, self.buffers[name], stored)
        self.stream.enqueue(self.queue)
        return {name: self.read(name) for name in self.graph.outputs}

    def read(self, tensor: str) -> np.ndarray:
        """A tensor of the last forward pass (every planned step's output is kept), as
        float32.
        """
        shape = self.graph.shapes[tensor]
        parts = self._gapped.get(tensor)
        value = np.empty(parts[-1][0] + parts[-1][1] if parts else shape, self._type(tensor))
        cl.enqueue_copy(self.queue, value, self.buffers[tensor])
        if parts:
            value = np.concatenate([value[start : start + n] for start, n in parts])
        return value.reshape(shape).astype(np.float32, copy=False)

    def time(self, repeats: int) -> Timing:
        """Kernel time (profiling events) and wall time (the model's own queue, without
        profiling) of forward passes on the inputs already written.
        """
        profiled = cl.CommandQueue(
            self.context, properties=cl.command_queue_properties.PROFILING_ENABLE
        )
        per_launch = []
        self.stream.enqueue_with_events(profiled)
        profiled.finish()
        for _ in range(repeats):
            events = self.stream.enqueue_with_events(profiled)
            profiled.finish()
            per_launch.append([(e.profile.end - e.profile.start) * 1e-9 for e in events])
        medians = iter(np.median(np.array(per_launch), axis=0).tolist())
        kernel_s = tuple(sum(next(medians) for _ in p.launches) for p in self.plan)
        return Timing(kernel_s, self.stream.seconds(self.queue, repeats), repeats)

    @property
    def launches(self) -> int:
        return sum(len(p.launches) for p in self.plan)
