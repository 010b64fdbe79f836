"""The `gpumem` command of the wheel: replaces this Python process with the gpumem binary shipped in the
package (gpumem/_bin/), so arguments, signals and exit codes are the binary's own. `gpumem exporter` is the
exception where the wheel has no gpumem-exporter beside the binary: the exporter is not part of the wheel
(it needs cpp-httplib's shared library), so this says where it comes from instead."""
import os
import sys

from . import _binary

EXPORTER_NOT_IN_WHEEL = (
    "gpumem exporter: the Prometheus exporter is not part of the pip wheel (it needs cpp-httplib's shared "
    "library); install the gpumem and gpumem-exporter .debs (`make deb`), or build gpumem from source with "
    "libcpp-httplib-dev, and run that installation's `gpumem exporter`")


def _command(args):
    """The subcommand: the first argument that is not an option."""
    return next((a for a in args if not a.startswith("-")), None)


def main():
    try:
        path = _binary.path()
    except _binary.GpumemNotFound as e:
        sys.stderr.write(f"{e}\n")
        return 1
    if _command(sys.argv[1:]) == "exporter" and not os.path.exists(
            os.path.join(os.path.dirname(path), "gpumem-exporter")):
        sys.stderr.write(EXPORTER_NOT_IN_WHEEL + "\n")
        return 1
    try:
        os.execv(path, [path, *sys.argv[1:]])
    except OSError as e:
        sys.stderr.write(f"gpumem: cannot start {path}: {e.strerror}\n")
        return 1
