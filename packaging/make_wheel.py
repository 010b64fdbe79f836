"""Builds gpumem's Python wheel from a build folder, with the standard library only (a wheel is a zip with a
.dist-info holding METADATA, WHEEL, entry_points.txt and RECORD; PEP 427). Contents:
  gpumem/              the Python package (python/gpumem/: monitoring API, notebook helpers)
  gpumem/_bin/         the gpumem binary, libgpumem.so and the PyTorch shim, together as in the build folder,
                       so `gpumem run` finds them beside itself; libgpumem_monitor.so, which gpumem.gpus() loads
  gpumem_torch.py ...  the PyTorch shim again as top-level modules, so `import gpumem_torch` works as the README
                       says without `gpumem run` (it finds gpumem/_bin/libgpumem.so from site-packages)
The console entry point `gpumem` (gpumem._cli:main) execs gpumem/_bin/gpumem. gpumem-exporter stays out: it
needs Debian's cpp-httplib, which other distributions lack (`gpumem exporter` says it is not part of the wheel
and where it comes from).
The platform tag is linux_x86_64, not manylinux: the gpumem binary links ncurses (libncursesw.so.6,
libtinfo.so.6; `gpumem top`), which no manylinux policy lets a wheel take from the system (pip would no longer
refuse it where glibc is too old, so METADATA's Requires-External says what the binaries need: glibc >= 2.X, X
the highest GLIBC_2.X symbol version they import (objdump -T), and ncurses).

Usage: make_wheel.py BUILD_DIR SOURCE_DIR VERSION OUT_DIR   (prints the wheel's path)
"""
import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

BINARIES = ["gpumem", "libgpumem.so", "libgpumem_monitor.so"]
SHIM = ["gpumem_torch.py", "gpumem_ipc.py", "gpumem_history.py", "gpumem_pools.py", "gpumem_sitecustomize.py"]
TOP_LEVEL = ["gpumem_torch", "gpumem_ipc", "gpumem_history", "gpumem_pools"]  # importable after pip install


def glibc_minor(paths):
    """Highest X of the GLIBC_2.X versions the files import (objdump -T lists the dynamic symbols)."""
    out = subprocess.run(["objdump", "-T", *paths], check=True, capture_output=True, text=True).stdout
    minors = [int(m) for m in re.findall(r"GLIBC_2\.(\d+)", out)]
    if not minors:
        raise SystemExit("make_wheel: objdump -T found no GLIBC symbol versions in " + " ".join(paths))
    return max(minors)


def stripped_copy(src, dst):
    shutil.copyfile(src, dst)
    if shutil.which("strip"):  # debug info is most of a RelWithDebInfo binary's size
        subprocess.run(["strip", "--strip-debug", dst], check=True)


def record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def build(build_dir, source_dir, version, out_dir):
    with tempfile.TemporaryDirectory() as tmp:
        files = {}  # arcname -> (path, executable)
        for name in BINARIES:
            src = os.path.join(build_dir, name)
            if not os.path.isfile(src):
                raise SystemExit(f"make_wheel: {src} is missing; build the targets gpumem, gpumem_shared and "
                                 "gpumem_monitor_shared first")
            dst = os.path.join(tmp, name)
            stripped_copy(src, dst)
            files[f"gpumem/_bin/{name}"] = (dst, name == "gpumem")
        for name in SHIM:
            files[f"gpumem/_bin/{name}"] = (os.path.join(source_dir, "python", name), False)
        for module in TOP_LEVEL:
            files[f"{module}.py"] = (os.path.join(source_dir, "python", f"{module}.py"), False)
        package = os.path.join(source_dir, "python", "gpumem")
        for name in sorted(os.listdir(package)):
            if name.endswith(".py"):
                files[f"gpumem/{name}"] = (os.path.join(package, name), False)

        # Honest tag (see the top): manylinux would promise that only glibc & co. are needed.
        glibc = glibc_minor([os.path.join(tmp, b) for b in BINARIES])
        tag = "py3-none-linux_x86_64"
        dist_info = f"gpumem-{version}.dist-info"
        meta = {
            f"{dist_info}/METADATA": (
                f"Metadata-Version: 2.1\nName: gpumem\nVersion: {version}\n"
                "Summary: see, explain and control GPU memory: caching allocator, monitor, notebook helpers\n"
                "Requires-Python: >=3.8\n"
                f"Requires-External: glibc (>=2.{glibc})\n"
                "Requires-External: libncursesw6\n"
                "Requires-External: libtinfo6\n"),
            f"{dist_info}/WHEEL": (
                f"Wheel-Version: 1.0\nGenerator: gpumem make_wheel.py\nRoot-Is-Purelib: false\nTag: {tag}\n"),
            f"{dist_info}/entry_points.txt": "[console_scripts]\ngpumem = gpumem._cli:main\n",
            f"{dist_info}/top_level.txt": "".join(f"{m}\n" for m in ["gpumem", *TOP_LEVEL]),
        }
        os.makedirs(out_dir, exist_ok=True)
        wheel = os.path.join(out_dir, f"gpumem-{version}-{tag}.whl")
        record = []
        with zipfile.ZipFile(wheel + ".part", "w", zipfile.ZIP_DEFLATED) as z:
            def add(arcname, data, executable):
                info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
                info.external_attr = (0o100755 if executable else 0o100644) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                z.writestr(info, data)
                record.append(record_line(arcname, data))

            for arcname, (path, executable) in sorted(files.items()):
                with open(path, "rb") as f:
                    add(arcname, f.read(), executable)
            for arcname, text in meta.items():
                add(arcname, text.encode(), False)
            record.append(f"{dist_info}/RECORD,,")
            info = zipfile.ZipInfo(f"{dist_info}/RECORD", date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o100644 << 16
            z.writestr(info, "\n".join(record) + "\n", zipfile.ZIP_DEFLATED)
        os.replace(wheel + ".part", wheel)
        return wheel


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__.rstrip().splitlines()[-1].strip())
    print(build(*sys.argv[1:]))
