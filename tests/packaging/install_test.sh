#!/usr/bin/env bash
# The existing build installed into a temporary prefix (install: `cmake --install`; deb: the .deb of
# `make deb`, built with cpack and unpacked with dpkg-deb -x), then used as an outside project would: a C++
# program built with find_package(gpumem) and with pkg-config runs on the host backend; the installed
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
  dpkg-deb -x "$deb" "$tmp/root"
  mv "$tmp/root/usr" "$tmp/prefix"
else
  cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
fi
for f in bin/gpumem lib/libgpumem.so lib/libgpumem_monitor.so include/gpumem/gpumem.h include/gpumem/gpumem_monitor.h \
         share/gpumem/python/gpumem_torch.py share/gpumem/python/gpumem_pools.py \
         share/gpumem/python/gpumem_sitecustomize.py \
         lib/cmake/gpumem/gpumemConfig.cmake lib/pkgconfig/gpumem.pc; do
  [[ -f $tmp/prefix/$f ]] || fail "cmake --install left out $f"
done
# Moved after installing: nothing in the tree may name the prefix it was installed to.
mv "$tmp/prefix" "$tmp/moved"
prefix=$tmp/moved
export GPUMEM_BACKEND=host

# find_package(gpumem): an outside CMake project (same generator and compiler as this build).
cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
cmake -S "$src/tests/packaging/consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_CXX_COMPILER="$cxx" >/dev/null || fail "find_package(gpumem) did not configure"
cmake --build "$tmp/consumer" >/dev/null || fail "the find_package consumer did not build"
"$tmp/consumer/consumer" || fail "the find_package consumer did not run"

# pkg-config
flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs gpumem) || fail "pkg-config gpumem"
[[ $flags == *"-I$prefix/lib/pkgconfig/../../include"* || $flags == *"-I$prefix/include"* ]] || fail "pkg-config flags: $flags"
"$cxx" -std=c++17 "$src/tests/packaging/consumer/consumer.cpp" $flags -o "$tmp/consumer_pc" || fail "pkg-config build"
LD_LIBRARY_PATH="$prefix/lib" "$tmp/consumer_pc" || fail "the pkg-config consumer did not run"

# The installed `gpumem run`, from another directory, with nothing of the build tree in reach.
cd "$tmp"
out=$(env -u GPUMEM_LIBRARY "$prefix/bin/gpumem" run -q --backend host -- python3 -c '
import os, gpumem_torch, gpumem_history
p = gpumem_torch.allocate(1 << 20)
print(os.environ["GPUMEM_LIBRARY"], gpumem_torch.memory_allocated(0))
gpumem_torch.deallocate(p)') || fail "installed gpumem run: $out"
[[ $out == "$prefix/lib/libgpumem.so 1048576" ]] || fail "installed gpumem run used: $out"
echo "gpumem run ok: $out"

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
