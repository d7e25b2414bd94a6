"""The registry of kernel families and kernels: octune's own, plus users' kernel folders.

A kernel is an OpenCL C template plus its search space (which names the template, the entry
function and the problem family); the pair's SHA-256 names the kernel version, because a
config is only valid for the exact source it was tuned with. A family is a Python module
that defines ``FAMILY`` (see ``octune.catalogue.family``). octune's own live in ``kernels/``
(templates and family modules) and ``search_spaces/``; a user's kernel folder holds all three
kinds of file side by side and is added with ``octune --kernel-dir DIR`` or
``$OCTUNE_KERNEL_PATH`` (folders separated by ``:``).

Templates share helper code through ``#include "NAME.clh"`` lines naming a file beside them.
octune pastes the file in itself rather than leaving it to the OpenCL compiler, so that the
kernel version hashes what is really built and a bundle carries one self-contained source.
"""

from __future__ import annotations

import copyreg
import difflib
import hashlib
import importlib
import importlib.util
import os
import pkgutil
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, cached_property, lru_cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from octune.catalogue.family import Family, Workload
from octune.catalogue.safe_yaml import YamlLimitError, safe_load
from octune.catalogue.space import SearchSpace
from octune.core.errors import OctuneError
from octune.core.problem import kernel_version_sha256

KERNEL_PATH_ENV = "OCTUNE_KERNEL_PATH"
#: What kernels/epilogue.clh pastes into a template that includes it.
EPILOGUE_MARK = "#define EPILOGUE_ARGUMENTS"
#: How many spaces one may extend through (``_extended``): a float16 1x1 conv is three deep.
MAX_EXTENDS = 3
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")


@dataclass(frozen=True)
class KernelSpec:
    name: str
    source: str
    space: SearchSpace

    @cached_property
    def sha256(self) -> str:
        """Computed once: a network run asks it of every kernel a turn (8 of a 90 s run's
        seconds on the H200's host, its builder threads beside it).
        """
        return kernel_version_sha256(self.source, self.space.source_text)

    @property
    def family(self) -> Family:
        return family(self.space.problem)

    def __reduce__(self) -> tuple[object, tuple[str, str, str]]:
        return kernel_from_texts, (self.name, self.source, self.space.source_text)

    def defines(self, config: Mapping[str, int], workload: Workload) -> dict[str, int]:
        """Everything the template is compiled with: the workload's defines, then the config's."""
        return {**workload.defines(), **self.space.defines(config)}

    def build_options(self, config: Mapping[str, int], workload: Workload) -> list[str]:
        """The defines; then OCTUNE_ENTRY_<entry>, so that a template with several entries can
        compile only this kernel's (gemv.cl's gemv_dot built with a gemv_axpy config's tiles
        unrolls hundreds of rows and held NVIDIA's compiler for seconds per candidate); then
        -w: compilers' remarks (e.g. PoCL's "loop not unrolled") would otherwise land on the
        user's terminal once per candidate; errors still fail the build.
        """
        defines = [
            f"-D{name}={int(value)}" for name, value in self.defines(config, workload).items()
        ]
        return [*defines, *self.dtype_options, f"-DOCTUNE_ENTRY_{self.space.entry}", "-w"]

    @property
    def dtype_options(self) -> list[str]:
        """``-DOCTUNE_FLOAT16=1`` and the like: which element type a template shared by several
        dtypes' kernels computes (none for float32, so float32 answers keep their options).
        """
        dtype = self.space.dtype
        return [] if dtype == "float32" else [f"-DOCTUNE_{dtype.upper()}=1"]

    @property
    def fuses_epilogue(self) -> bool:
        """Whether the template includes kernels/epilogue.clh, so that a runtime can build it
        with -DEPILOGUE and have a layer's bias, batch-norm, residual and activation applied in
        its stores instead of in a launch of their own.
        """
        return EPILOGUE_MARK in self.source

    def takes(self, workload: Workload) -> str | None:
        """Why this kernel cannot run the workload (its space's ``requires:``), or None."""
        if workload.dtype != self.space.dtype:
            return f"kernel {self.name} computes {self.space.dtype}, not {workload.dtype}"
        why = self.space.why_not_applicable(workload.shape_vars())
        return None if why is None else f"kernel {self.name} {why}"


# --- where kernels come from -------------------------------------------------------------------


def kernel_dirs() -> list[Path]:
    """Users' kernel folders, from ``$OCTUNE_KERNEL_PATH`` (``--kernel-dir`` sets it, so build
    and measuring processes see the same kernels).
    """
    return [Path(part) for part in os.environ.get(KERNEL_PATH_ENV, "").split(":") if part]


def add_kernel_dir(path: Path) -> None:
    """Add a user's kernel folder for this process and the processes it starts."""
    if not path.is_dir():
        raise OctuneError(
            f"kernel folder {path} does not exist: pass a folder with .cl, .yaml, .py"
        )
    folders = [str(p) for p in kernel_dirs()]
    folders.append(str(path.resolve()))
    os.environ[KERNEL_PATH_ENV] = ":".join(folders)
    _clear()


def _clear() -> None:
    """Forget what was loaded under the previous kernel folders: the families, the kernels, and
    the kernels rebuilt from stored texts, whose spaces took their shape names from a family.
    """
    families.cache_clear()
    _kernel_files.cache_clear()
    load_kernel.cache_clear()
    kernel_from_texts.cache_clear()


@cache
def families() -> dict[str, Family]:
    """Every family: octune's modules in ``octune.kernels``, then each user folder's ``*.py``.
    Found by name, as plug-ins are: the families build on the tuner, not the other way round.
    """
    builtin = importlib.import_module("octune.kernels")
    found: dict[str, Family] = {}
    for module in pkgutil.iter_modules(builtin.__path__):
        _register(found, importlib.import_module(f"octune.kernels.{module.name}"), module.name)
    for folder in kernel_dirs():
        for path in _own_files(folder, "*.py"):
            _register(found, _import_user_module(path), str(path))
    return found


_File = TypeVar("_File", Path, Traversable)


def describe_shape(problem: str, shape: Mapping[str, int], fallback: str) -> str:
    """A workload as its family describes it (``conv2d 64→128 3x3 56x56 s2``); ``fallback``
    for a family not installed here, or a shape stored with keys its family no longer has.
    """
    family = families().get(problem)
    try:
        return family.describe(shape) if family is not None else fallback
    except KeyError:
        return fallback


def _own_files(folder: Path, pattern: str) -> list[Path]:
    """A user folder's files matching ``pattern``, each checked by ``_inside``."""
    return [_inside(folder, path) for path in sorted(folder.glob(pattern))]


def _inside(folder: Path | Traversable, path: _File) -> _File:
    """``path``, refused where it is a link to a file outside ``folder``: whatever a kernel
    folder holds is compiled for, uploaded to and exported with every device it serves (a link
    to /etc/passwd would travel as a template's source).
    """
    if isinstance(folder, Path) and isinstance(path, Path):
        target = path.resolve()
        if not target.is_relative_to(folder.resolve()):
            raise OctuneError(
                f"{path} links to {target}, outside the kernel folder {folder}: copy the file "
                "into the folder"
            )
    return path


def _import_user_module(path: Path) -> object:
    # Named by where it lies: two folders' modules of one name (a/kernels/x.py, b/kernels/x.py)
    # are two modules.
    where = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    name = f"octune_user_kernels.{path.stem}_{where}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise OctuneError(f"{path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # a user's module: say which file, in one line
        del sys.modules[name]
        raise OctuneError(f"{path}: importing it failed: {type(error).__name__}: {error}") from None
    return module


def _register(found: dict[str, Family], module: object, origin: str) -> None:
    family_object = getattr(module, "FAMILY", None)
    if family_object is None:
        if not origin.endswith(".py"):
            return  # a helper module of octune's own
        raise OctuneError(
            f"{origin}: defines no FAMILY (an octune.catalogue.family.Family instance)"
        )
    if not isinstance(family_object, Family):
        raise OctuneError(f"{origin}: FAMILY is not an octune.catalogue.family.Family instance")
    name = family_object.name
    if not isinstance(name, str) or not _NAME.match(name):
        raise OctuneError(f"{origin}: family name {name!r} must be letters, digits and _")
    if name in found:
        raise OctuneError(f"{origin}: family '{name}' is defined twice")
    found[name] = family_object


def _workload(family_name: str, items: tuple[tuple[str, int], ...], dtype: str) -> Workload:
    return Workload(family(family_name), items, dtype)


def _reduce_workload(workload: Workload) -> tuple[object, tuple[object, ...]]:
    """A Workload pickles by its family's name (a worker process finds the family again as
    this module finds families): a user's family module is not importable by name there.
    """
    return _workload, (workload.family.name, workload.items, workload.dtype)


copyreg.pickle(Workload, _reduce_workload)


def family(name: str) -> Family:
    known = families()
    if name not in known:
        close = difflib.get_close_matches(name, list(known), n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise OctuneError(
            f"unknown kernel family '{name}': {hint}known families: {', '.join(known)}"
        )
    return known[name]


@cache
def _kernel_files() -> dict[str, tuple[str, str, str]]:
    """Kernel name -> (space text, template text, where the space file is)."""
    found: dict[str, tuple[str, str, str]] = {}
    spaces = resources.files("octune.search_spaces")
    templates = resources.files("octune.kernels")
    sources = [
        (p.name, p.read_text(), templates, f"search_spaces/{p.name}")
        for p in spaces.iterdir()
        if p.name.endswith(".yaml")
    ]
    for folder in kernel_dirs():
        sources += [(p.name, p.read_text(), folder, str(p)) for p in _own_files(folder, "*.yaml")]
    texts: dict[str, str] = {}
    for file_name, space_text, _, origin in sources:
        name = file_name.removesuffix(".yaml")
        if name in texts:
            raise OctuneError(f"{origin}: kernel '{name}' is defined twice")
        texts[name] = space_text
    for file_name, own_text, template_dir, origin in sources:
        name = file_name.removesuffix(".yaml")
        space_text = _extended(own_text, texts, origin)
        template_name = _template_name(space_text, origin)
        template = _inside(template_dir, template_dir.joinpath(f"{template_name}.cl"))
        if not template.is_file():
            raise OctuneError(f"{origin} names template {template_name}.cl, which is not beside it")
        found[name] = (space_text, expand_includes(template, template_dir), origin)
    return found


def _extended(
    text: str, spaces: Mapping[str, str], origin: str, chain: tuple[str, ...] = ()
) -> str:
    """A space that says ``extends: OTHER`` is OTHER's (itself extended first, so a float16
    variant can extend conv2d_1x1, which extends gemm) with its own sections on top: its
    parameters and derived variables added or replacing OTHER's of the same name, its
    constraints added to OTHER's, any other section replacing OTHER's. The result, written out
    whole, is the space's text, so the kernel version covers every file and a bundle carries
    one self-contained space; it keeps ``extends``, so that a search can start from OTHER's
    best tiles (``octune.tuner.session``).
    """
    own = _yaml_mapping(text)
    base_name = own.get("extends")
    if base_name is None:
        return text
    if not isinstance(base_name, str) or base_name not in spaces:
        raise OctuneError(
            f"{origin}: extends {base_name!r}, which is no kernel's space: name one of "
            f"{', '.join(sorted(spaces))}"
        )
    if base_name in chain or len(chain) >= MAX_EXTENDS:
        raise OctuneError(
            f"{origin}: extends {' -> '.join((*chain, base_name))}: a circle or a chain of more "
            f"than {MAX_EXTENDS}; extend a space that extends fewer"
        )
    base = _yaml_mapping(_extended(spaces[base_name], spaces, origin, (*chain, base_name)))
    merged = {**base, **own}
    for section in ("parameters", "derived"):
        merged[section] = {**(base.get(section) or {}), **(own.get(section) or {})}
    merged["constraints"] = [*(base.get("constraints") or []), *(own.get("constraints") or [])]
    header = f"# {origin.rsplit('/', 1)[-1]}: search_spaces/{base_name}.yaml extended\n"
    return header + yaml.safe_dump(merged, sort_keys=False, width=100)


def problem_of(space_text: str) -> object:
    """The family a space's text names (its ``problem:``), read without building the space: a
    stored version of a user's family that is not installed here cannot be built, and a lookup
    that only sorts versions by family needs not build it.
    """
    return _yaml_mapping(space_text).get("problem")


def _yaml_mapping(text: str) -> dict[str, Any]:
    try:
        data = safe_load(text)
    except (yaml.YAMLError, YamlLimitError):
        return {}  # SearchSpace says what is wrong, with the line
    return data if isinstance(data, dict) else {}


_INCLUDE = re.compile(r'^#include "([A-Za-z0-9_]+\.clh)"[ \t]*\n?', re.MULTILINE)


def expand_includes(template: Traversable, folder: Traversable) -> str:
    """The template with each ``#include "NAME.clh"`` line replaced by that file (one level:
    helper files include nothing, so there is no order or cycle to resolve).
    """

    def paste(match: re.Match[str]) -> str:
        helper = _inside(folder, folder.joinpath(match.group(1)))
        if not helper.is_file():
            raise OctuneError(f"{template.name} includes {match.group(1)}, which is not beside it")
        return helper.read_text()

    return _INCLUDE.sub(paste, template.read_text())


def _template_name(space_text: str, origin: str) -> str:
    name = _yaml_mapping(space_text).get("kernel")
    if not isinstance(name, str) or not _NAME.match(name):
        _space(Path(origin).stem, space_text, origin)  # raises the precise error
        raise OctuneError(f"{origin}: 'kernel' must name a template file (letters, digits, _)")
    return name


def available_kernels() -> list[str]:
    return sorted(_kernel_files())


def kernels_of(problem: str) -> list[str]:
    """The kernels that solve one family's problem (conv2d: direct, depthwise, 1x1...)."""
    return [name for name in available_kernels() if load_kernel(name).space.problem == problem]


def resolve_kernels(name: str) -> list[KernelSpec]:
    """What ``octune tune NAME`` tunes: every kernel of the family NAME, else the kernel NAME
    (a family's name wins, as in lookups: its fastest kernel answers).
    """
    if name in families():
        kernels = kernels_of(name)
        if not kernels:
            raise OctuneError(f"family '{name}' has no kernel: add a .yaml space naming it")
        return [load_kernel(kernel) for kernel in kernels]
    if name in _kernel_files():
        return [load_kernel(name)]
    known = [*available_kernels(), *families()]
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    raise OctuneError(
        f"unknown kernel '{name}': {hint}kernels: {', '.join(available_kernels())}; "
        f"families: {', '.join(families())}"
    )


@cache
def load_kernel(name: str) -> KernelSpec:
    files = _kernel_files()
    if name not in files:
        resolve_kernels(name)  # raises the one-line error with the closest names
    space_text, template, origin = files[name]
    return KernelSpec(name=name, source=template, space=_space(name, space_text, origin))


def retired_versions(name: str) -> Mapping[str, str]:
    """The earlier versions of kernel ``name`` that its installed space retires (sha256 -> why
    it computed wrong results); none for a kernel not installed here.
    """
    return load_kernel(name).space.retired if name in _kernel_files() else {}


@lru_cache(maxsize=64)
def kernel_from_texts(name: str, source: str, space_text: str) -> KernelSpec:
    """A kernel from its template and space texts: how worker processes rebuild a KernelSpec
    (compiled expressions do not pickle), and how tests load fixture kernels. Remembered: a
    measuring process receives the same kernel with every session's job (0.09 s to rebuild).
    """
    return KernelSpec(name=name, source=source, space=_space(name, space_text, f"{name}.yaml"))


def _space(name: str, space_text: str, origin: str) -> SearchSpace:
    problem = _yaml_mapping(space_text).get("problem")
    shape_names: tuple[str, ...] = ()
    if isinstance(problem, str) and problem in families():
        shape_names = family(problem).shape_names
    space = SearchSpace.from_yaml(space_text, origin, shape_names=shape_names)
    if space.problem not in families():
        raise OctuneError(
            f"{origin} names problem '{space.problem}', which octune does not know: "
            f"use one of {', '.join(families())}, or add its family module"
        )
    return space
