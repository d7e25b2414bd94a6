"""Building OpenCL programs through an on-disk cache of program binaries.

Builders in other processes fill the cache and the measuring process loads from it, so a
candidate is compiled once however many processes touch it, and a resumed or repeated
session does not compile again. Entries are keyed by the device fingerprint (which covers
the driver version), the exact source and the build options.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

import platformdirs
import pyopencl as cl

CACHE_ENV_VAR = "OCTUNE_CACHE_DIR"
#: Platforms whose driver keeps its own on-disk cache of built programs, keyed by source and
#: options: PoCL. Ours would only add cost there: PoCL takes about 0.9 s to hand out a
#: program's binary (on a 2-core AMD EPYC, against 0.4 s for the build itself).
SELF_CACHING_PLATFORMS = ("Portable Computing Language",)


def default_cache_root() -> Path:
    if root := os.environ.get(CACHE_ENV_VAR):
        return Path(root)
    return Path(platformdirs.user_cache_dir("octune")) / "programs"


@contextlib.contextmanager
def _compiler_stderr_silenced() -> Iterator[None]:
    """PoCL's compiler prints diagnostics ("3 errors generated.") straight to the process's
    stderr as well as into the build log; the log is what octune reports, in one line.
    """
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class ProgramCache:
    def __init__(self, root: Path | None = None) -> None:
        self.root = root or default_cache_root()

    def path(self, fingerprint: str, source: str, options: Sequence[str]) -> Path:
        digest = hashlib.sha256()
        for part in (source, *options):
            digest.update(part.encode())
            digest.update(b"\0")
        return self.root / fingerprint / f"{digest.hexdigest()}.bin"

    def build(
        self, context: cl.Context, fingerprint: str, source: str, options: Sequence[str]
    ) -> cl.Program:
        """The built program, from a cached binary when there is a usable one.

        A binary the driver refuses (truncated file, another driver build) is rebuilt from
        source and replaced; a source build error raises cl.Error for the caller to classify.
        """
        if context.devices[0].platform.name.startswith(SELF_CACHING_PLATFORMS):
            return self._from_source(context, source, options)
        path = self.path(fingerprint, source, options)
        if path.is_file():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", cl.CompilerWarning)
                try:
                    binary = path.read_bytes()
                    return cl.Program(context, context.devices, [binary]).build(options=options)
                except (cl.Error, OSError):
                    pass
        program = self._from_source(context, source, options)
        self._save(path, program.binaries[0])
        return program

    @staticmethod
    def _from_source(context: cl.Context, source: str, options: Sequence[str]) -> cl.Program:
        with warnings.catch_warnings():
            # A successful build's log (e.g. "loop not unrolled") is not the user's concern.
            warnings.simplefilter("ignore", cl.CompilerWarning)
            with _compiler_stderr_silenced():
                return cl.Program(context, source).build(options=list(options))

    @staticmethod
    def _save(path: Path, binary: bytes) -> None:
        """Write to a temporary file and rename, so a reader never sees half a binary."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as handle:
                handle.write(binary)
            os.replace(handle.name, path)
        except OSError:
            pass  # an unwritable cache costs rebuilds, not results
