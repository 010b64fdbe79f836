#!/usr/bin/env bash
# The existing build installed into a temporary prefix (install: `cmake --install`; deb: the .deb of
# `make deb`, built with cpack and unpacked with dpkg-deb -x), then used as an outside project would: programs
# built with find_package(gpumem) and with pkg-config run the C ABI on the host backend, the C++ API
# (Allocator over the sim backend, memory.hpp, catching gpumem::OutOfMemoryError) and libgpumem_monitor.so
# (gpumem::monitor, gpumem_monitor.pc) over the NVML test double; the installed
# `gpumem run` finds libgpumem.so and the shim in the installed layout; the .deb's Depends name the glibc /
# libstdc++ versions the binaries' symbols need. Usage: install_test.sh BUILD_DIR SRC_DIR [install|deb]
set -euo pipefail
build=$(realpath "$1") src=$(realpath "$2") mode=${3:-install}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL $*" >&2; exit 1; }

if [[ $mode == deb ]]; then
  (cd "$build" && cpack -G DEB -B "$tmp/deb" >/dev/null) || fail "cpack -G DEB"
  deb=$(ls "$tmp"/deb/gpumem_*_amd64.deb) || fail "cpack wrote no .deb"
  control=$(dpkg-deb -f "$deb" Depends)
  glibc=$(objdump -T "$build/gpumem" "$build/libgpumem.so" "$build/libgpumem_monitor.so" | grep -o 'GLIBC_2\.[0-9]*' |
          sort -uV | tail -1)
  [[ $control == *"libc6 (>= ${glibc#GLIBC_})"* ]] || fail ".deb Depends ($control) do not say libc6 >= ${glibc#GLIBC_}"
  for pkg in libstdc++6 zlib1g libncursesw6 libtinfo6; do [[ $control == *"$pkg"* ]] || fail ".deb lacks $pkg"; done
  # gpumem itself needs glibc, libstdc++, zlib and ncurses only (it installs on Ubuntu 24.04, which has no
  # libcpp-httplib0.11): the exporter and its cpp-httplib are the gpumem-exporter package.
  [[ $control != *httplib* ]] || fail "the gpumem .deb depends on cpp-httplib: $control"
  [[ $(dpkg-deb -c "$deb") != *gpumem-exporter* ]] || fail "the gpumem .deb holds the exporter"
  dpkg-deb -x "$deb" "$tmp/root"
  if [[ -x $build/gpumem-exporter ]]; then
    exdeb=$(ls "$tmp"/deb/gpumem-exporter_*_amd64.deb) || fail "cpack wrote no gpumem-exporter .deb"
    excontrol=$(dpkg-deb -f "$exdeb" Depends)
    httplib=$(readelf -d "$build/gpumem-exporter" | sed -n 's/.*NEEDED.*\[\(libcpp-httplib\.so\.[0-9.]*\)\]/\1/p')
    [[ -z $httplib || $excontrol == *"${httplib/.so./}"* ]] || fail "gpumem-exporter .deb ($excontrol) lacks ${httplib/.so./}"
    version=$(dpkg-deb -f "$deb" Version)
    [[ $excontrol == *"gpumem (= $version)"* ]] || fail "gpumem-exporter .deb does not depend on gpumem $version: $excontrol"
    dpkg-deb -x "$exdeb" "$tmp/root"
    unit=$tmp/root/usr/lib/systemd/system/gpumem-exporter.service
    [[ -f $unit ]] || fail "the gpumem-exporter .deb has no lib/systemd/system/gpumem-exporter.service"
    grep -q '^ExecStart=/usr/bin/gpumem exporter ' "$unit" || fail "the unit's ExecStart: $(grep ExecStart "$unit")"
    if command -v systemd-analyze >/dev/null; then  # the unit as systemd reads it, ExecStart in the unpacked tree
      mkdir "$tmp/unit" && sed "s|^ExecStart=/usr/bin/|ExecStart=$tmp/root/usr/bin/|" "$unit" >"$tmp/unit/gpumem-exporter.service"
      out=$(systemd-analyze verify "$tmp/unit/gpumem-exporter.service" 2>&1) || fail "systemd-analyze verify: $out"
    fi
  fi
  mv "$tmp/root/usr" "$tmp/prefix"
else
  cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
  if [[ -x $build/gpumem-exporter ]]; then
    grep -q "^ExecStart=$tmp/prefix/bin/gpumem exporter " "$tmp/prefix/lib/systemd/system/gpumem-exporter.service" ||
      fail "cmake --install: no unit whose ExecStart is the installed gpumem"
  fi
fi
for f in bin/gpumem lib/libgpumem.so lib/libgpumem_monitor.so include/gpumem/gpumem.h include/gpumem/gpumem_monitor.h \
         share/gpumem/python/gpumem_torch.py share/gpumem/python/gpumem_pools.py \
         share/gpumem/python/gpumem_sitecustomize.py \
         lib/cmake/gpumem/gpumemConfig.cmake lib/pkgconfig/gpumem.pc lib/pkgconfig/gpumem_monitor.pc \
         lib/python3/dist-packages/gpumem.pth; do
  [[ -f $tmp/prefix/$f ]] || fail "cmake --install left out $f"
done
# Moved after installing: nothing in the tree may name the prefix it was installed to.
mv "$tmp/prefix" "$tmp/moved"
prefix=$tmp/moved
export GPUMEM_BACKEND=host
fake_nvml=(GPUMEM_NVML_LIBRARY="$build/fake_nvml/libgpumem_fake_nvml_current.so"
           GPUMEM_FAKE_NVML_SCENARIO="$src/tests/monitor/scenarios/two_gpus.txt")

# libgpumem.so exports the C ABI and the C++ API of the headers, not the components' internals (src/).
exported=$(nm -DC --defined-only "$prefix/lib/libgpumem.so")
internal=$(grep -E ' gpumem::(api|engine|control|cuda|backends)::' <<<"$exported" || true)
[[ -z $internal ]] || fail "libgpumem.so exports internals: $(head -3 <<<"$internal")"
grep -q ' typeinfo for gpumem::OutOfMemoryError$' <<<"$exported" ||
  fail "libgpumem.so does not export gpumem::OutOfMemoryError's typeinfo"

# find_package(gpumem): an outside CMake project (same generator and compiler as this build).
cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
cmake -S "$src/tests/packaging/consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_CXX_COMPILER="$cxx" >/dev/null || fail "find_package(gpumem) did not configure"
cmake --build "$tmp/consumer" >/dev/null || fail "the find_package consumer did not build"
"$tmp/consumer/consumer" || fail "the find_package consumer did not run"
"$tmp/consumer/consumer_cpp" || fail "the find_package C++ API consumer did not run"
out=$(env "${fake_nvml[@]}" "$tmp/consumer/consumer_monitor") || fail "the find_package gpumem::monitor consumer: $out"
[[ $out == "monitor consumer ok: status 0,"* ]] || fail "gpumem::monitor consumer: $out"

# pkg-config
flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs gpumem) || fail "pkg-config gpumem"
[[ $flags == *"-I$prefix/lib/pkgconfig/../../include"* || $flags == *"-I$prefix/include"* ]] || fail "pkg-config flags: $flags"
"$cxx" -std=c++17 "$src/tests/packaging/consumer/consumer.cpp" $flags -o "$tmp/consumer_pc" || fail "pkg-config build"
LD_LIBRARY_PATH="$prefix/lib" "$tmp/consumer_pc" || fail "the pkg-config consumer did not run"
"$cxx" -std=c++20 "$src/tests/packaging/consumer/consumer_cpp.cpp" $flags -o "$tmp/consumer_cpp_pc" || fail "pkg-config C++ API build"
LD_LIBRARY_PATH="$prefix/lib" "$tmp/consumer_cpp_pc" || fail "the pkg-config C++ API consumer did not run"
mflags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs gpumem_monitor) || fail "pkg-config gpumem_monitor"
"$cxx" "$src/tests/packaging/consumer/consumer_monitor.cpp" $mflags -o "$tmp/consumer_monitor_pc" || fail "pkg-config gpumem_monitor build"
env LD_LIBRARY_PATH="$prefix/lib" "${fake_nvml[@]}" "$tmp/consumer_monitor_pc" >/dev/null || fail "the pkg-config gpumem_monitor consumer did not run"

# The installed `gpumem run`, from another directory, with nothing of the build tree in reach.
cd "$tmp"
out=$(env -u GPUMEM_LIBRARY "$prefix/bin/gpumem" run -q --backend host -- python3 -c '
import os, gpumem_torch, gpumem_history
p = gpumem_torch.allocate(1 << 20)
print(os.environ["GPUMEM_LIBRARY"], gpumem_torch.memory_allocated(0))
gpumem_torch.deallocate(p)') || fail "installed gpumem run: $out"
[[ $out == "$prefix/lib/libgpumem.so 1048576" ]] || fail "installed gpumem run used: $out"
echo "gpumem run ok: $out"

# `import gpumem_torch` from the installed tree (not inside `gpumem run`): the shim finds PREFIX/lib/libgpumem.so
# from PREFIX/share/gpumem/python, on sys.path through PYTHONPATH or the gpumem.pth of lib/python3/dist-packages.
for how in PYTHONPATH pth; do
  if [[ $how == pth ]]; then
    env=(PYTHONPATH=); code="import site; site.addsitedir('$prefix/lib/python3/dist-packages'); "
  else
    env=(PYTHONPATH="$prefix/share/gpumem/python"); code=
  fi
  out=$(env -u GPUMEM_LIBRARY "${env[@]}" PYTHONDONTWRITEBYTECODE=1 python3 -c "$code
import gpumem_torch
p = gpumem_torch.allocate(1 << 20); print(gpumem_torch._lib_path, gpumem_torch.memory_allocated(0))
gpumem_torch.deallocate(p)") || fail "import gpumem_torch from the installed tree ($how): $out"
  [[ $out == "$prefix/lib/libgpumem.so 1048576" ]] || fail "import gpumem_torch from the installed tree ($how) used: $out"
done

# `gpumem exporter` without gpumem-exporter beside it says so in one sentence.
mkdir "$tmp/alone" && cp "$prefix/bin/gpumem" "$tmp/alone/"
if out=$("$tmp/alone/gpumem" exporter --once 2>&1); then fail "gpumem exporter without the exporter: $out"; fi
[[ $out == "gpumem exporter: $tmp/alone/gpumem-exporter is not installed: it comes with the gpumem-exporter .deb"* ]] ||
  fail "gpumem exporter without the exporter said: $out"

# The Python package's monitoring API over the installed tree: libgpumem_monitor.so found in ../lib of the binary.
out=$(GPUMEM_BINARY="$prefix/bin/gpumem" PYTHONPATH="$src/python" PYTHONDONTWRITEBYTECODE=1 \
      GPUMEM_NVML_LIBRARY="$build/fake_nvml/libgpumem_fake_nvml_current.so" \
      GPUMEM_FAKE_NVML_SCENARIO="$src/tests/monitor/scenarios/two_gpus.txt" python3 -c '
import gpumem, gpumem._monitor as m
print(m.backend()[1], gpumem.gpus()[0].memory_used)') || fail "gpumem.gpus() over the installed tree: $out"
[[ $out == "$prefix/lib/libgpumem_monitor.so $((20480 << 20))" ]] || fail "gpumem.gpus() over the installed tree used: $out"

# The .deb's Depends against the symbol versions the binaries need.
deps=$(sed -n 's/^set(GPUMEM_DEB_GLIBC \([0-9.]*\).*/\1/p' "$src/packaging/deb.cmake")
binaries=("$prefix/bin/gpumem" "$prefix/lib/libgpumem.so" "$prefix/lib/libgpumem_monitor.so")
need=$(objdump -T "${binaries[@]}" | grep -o 'GLIBC_2\.[0-9]*' | sort -uV | tail -1)
[[ "GLIBC_$deps" == "$need" ]] || fail "packaging/deb.cmake says libc6 >= $deps, the binaries need $need"
cxxneed=$(objdump -T "${binaries[@]}" | grep -o 'GLIBCXX_3\.4\.[0-9]*' | sort -uV | tail -1)
[[ $(printf "%s\n" "$cxxneed" GLIBCXX_3.4.29 | sort -V | tail -1) == GLIBCXX_3.4.29 ]] || fail "libstdc++6 >= 11 no longer enough: $cxxneed"
echo "PASS $mode: find_package, pkg-config, gpumem run from $prefix"
