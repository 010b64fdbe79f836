"""Which gpumem binary the Python package runs: $GPUMEM_BINARY, else the one in the wheel (gpumem/_bin/),
else `gpumem` on PATH (the .deb or `cmake --install`)."""
import os
import shutil

_HERE = os.path.dirname(os.path.abspath(__file__))


class GpumemError(RuntimeError):
    """A gpumem command failed; the message is its sentence."""


class GpumemNotFound(GpumemError):
    pass


def path():
    explicit = os.environ.get("GPUMEM_BINARY")
    if explicit:
        return explicit
    bundled = os.path.join(_HERE, "_bin", "gpumem")
    if os.path.isfile(bundled):
        return bundled
    # The first gpumem on PATH that is the binary itself: the wheel's `gpumem` console script is on PATH
    # too, and running it from here would exec itself for ever.
    for directory in os.environ.get("PATH", os.defpath).split(os.pathsep):
        found = shutil.which("gpumem", path=directory or os.curdir)
        if found and _is_elf(found):
            return found
    raise GpumemNotFound("gpumem: the gpumem binary was not found (install the wheel or the .deb, "
                         "or set GPUMEM_BINARY to its path)")


def _is_elf(candidate):
    try:
        with open(candidate, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False
