"""OpenCL runtimes from PyPI that octune registers itself, so no user sets a variable.

PyPI's PoCL wheel registers itself: it drops an .icd file beside the ICD loader inside the
pyopencl wheel. Intel's CPU runtime (`intel-opencl-rt`) does not: its .icd names a
placeholder path, so the loader never finds it. octune writes a vendor folder holding an
.icd that names the installed library, plus every .icd the loader would have read anyway
(the system's /etc/OpenCL/vendors, or the user's own OCL_ICD_VENDORS), and points the loader
at it through OCL_ICD_VENDORS before the first platform query. Child processes inherit it.

The Intel runtime is the fallback for CPUs that PoCL 3.0's LLVM 14 does not know (AMD Zen 5
and later: "unknown target CPU 'generic'"); `octune setup` installs it only there.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

VENDORS_ENV_VAR = "OCL_ICD_VENDORS"
SYSTEM_VENDORS = Path("/etc/OpenCL/vendors")


@dataclass(frozen=True)
class PipRuntime:
    """An OpenCL runtime that pip installs but the ICD loader cannot find by itself."""

    label: str
    distribution: str  # the PyPI distribution that carries the library
    library: str  # the ICD library's file name inside that distribution
    extra: str  # octune's extra that installs it: `pip install 'octune[<extra>]'`


INTEL_CPU = PipRuntime(
    label="Intel's OpenCL CPU runtime",
    distribution="intel-opencl-rt",
    library="libintelocl.so",
    extra="intel-cpu",
)
PIP_RUNTIMES = (INTEL_CPU,)


def installed_library(runtime: PipRuntime) -> Path | None:
    """The runtime's ICD library where pip put it (the venv's lib/ or ~/.local/lib)."""
    try:
        files = metadata.files(runtime.distribution) or []
    except metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name == runtime.library:
            path = Path(str(file.locate())).resolve()
            if path.is_file():
                return path
    return None


def loader_icd_files(vendors: str | None) -> dict[str, str]:
    """The .icd files (name: content) the ICD loader reads with OCL_ICD_VENDORS = `vendors`:
    that folder, that .icd file, or that library (ocl-icd takes all three), or the system
    folder when it is unset.
    """
    source = Path(vendors) if vendors else SYSTEM_VENDORS
    if vendors and not source.is_dir() and source.suffix != ".icd":
        return {"user-library.icd": f"{vendors}\n"}
    paths = [source] if source.suffix == ".icd" else sorted(source.glob("*.icd"))
    entries = {}
    for path in paths:
        try:
            entries[path.name] = path.read_text()
        except OSError:
            continue  # an unreadable entry is one the loader would skip too
    return entries


def vendor_folder(entries: dict[str, str], root: Path) -> Path:
    """A folder holding exactly `entries`, named by their content: written once, atomically,
    so processes starting together (builders, measurers) never see half of it.
    """
    digest = hashlib.sha256(repr(sorted(entries.items())).encode()).hexdigest()[:16]
    folder = root / digest
    if folder.is_dir():
        return folder
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=root, prefix=".new-"))
    for name, content in entries.items():
        (staging / name).write_text(content)
    try:
        staging.rename(folder)
    except OSError:  # another process got there first, with the same content
        for path in staging.iterdir():
            path.unlink()
        staging.rmdir()
    return folder


def register_pip_runtimes(root: Path) -> Path | None:
    """Make the ICD loader see every installed PipRuntime; the vendor folder, or None when
    there is nothing to register (or it is registered already, by a parent process).
    """
    current = os.environ.get(VENDORS_ENV_VAR)
    if current and Path(current).parent == root:
        return None
    libraries = {
        f"octune-{runtime.extra}.icd": f"{library}\n"
        for runtime in PIP_RUNTIMES
        if (library := installed_library(runtime)) is not None
    }
    if not libraries:
        return None
    try:
        folder = vendor_folder({**loader_icd_files(current), **libraries}, root)
    except OSError:
        return None  # an unwritable cache: the runtime stays unseen, `octune devices` tells
    os.environ[VENDORS_ENV_VAR] = str(folder)
    return folder


def extra_requirements(extra: str) -> list[str]:
    """The requirements octune's pyproject lists for an extra that apply to this machine (their
    markers hold here), as pip takes them.
    """
    from packaging.requirements import Requirement

    requirements = []
    for text in metadata.requires("octune") or []:
        requirement = Requirement(text)
        if requirement.marker is not None and requirement.marker.evaluate({"extra": extra}):
            requirement.marker = None
            requirements.append(str(requirement))
    return requirements


def system_driver_hint(machine: str | None = None) -> str:
    """What to install where PyPI has no CPU runtime for this machine: on ARM and RISC-V
    boards, the distribution's PoCL or the GPU vendor's driver (Mali's libmali, Adreno's);
    elsewhere the vendor's driver.
    """
    import platform

    arch = (machine or platform.machine()).lower()
    if arch.startswith(("aarch64", "arm", "riscv")):
        return (
            "install PoCL from the distribution (Debian, Ubuntu: apt install pocl-opencl-icd) or "
            "the board's GPU driver (Mali: libmali, Adreno: the vendor's libOpenCL), registered "
            "in /etc/OpenCL/vendors (docs/runtimes.md)"
        )
    return "install your vendor's OpenCL driver (docs/runtimes.md)"
