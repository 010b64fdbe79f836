"""The `gpumem` command of the wheel: replaces this Python process with the gpumem binary shipped in the
package (gpumem/_bin/), so arguments, signals and exit codes are the binary's own."""
import os
import sys

from . import _binary


def main():
    try:
        path = _binary.path()
    except _binary.GpumemNotFound as e:
        sys.stderr.write(f"{e}\n")
        return 1
    try:
        os.execv(path, [path, *sys.argv[1:]])
    except OSError as e:
        sys.stderr.write(f"gpumem: cannot start {path}: {e.strerror}\n")
        return 1
