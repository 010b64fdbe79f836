# `make deb`: the `cmake --install` tree under /usr as Debian packages (CPack's DEB generator, one per
# component), binaries stripped:
#   gpumem_VERSION_amd64.deb           everything but the exporter: gpumem, libgpumem.so, libgpumem_monitor.so,
#                                      headers, CMake config, pkg-config files, the PyTorch shim
#   gpumem-exporter_VERSION_amd64.deb  gpumem-exporter and its systemd unit (lib/systemd/system)
# Depends: the runtime packages of what the binaries link (ldd build/gpumem build/libgpumem.so); the lowest
# versions are the highest symbol versions they use (objdump -T: GLIBC_2.34, GLIBCXX_3.4.29 = GCC 11;
# tests/packaging checks them against the built binaries). gpumem needs glibc, libstdc++, zlib and ncurses only,
# so it installs on Debian 12 and Ubuntu 24.04 alike. gpumem-exporter needs cpp-httplib's shared library too:
# Debian ships cpp-httplib compiled (its httplib.h holds declarations only, and there is no static archive), so
# the exporter cannot be built without it; its package depends on the exact library package
# (libcpp-httplib0.11 on Debian 12; a distribution with another version builds the exporter from source), and
# `gpumem exporter` says which of the two is missing.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME gpumem)
set(CPACK_PACKAGE_VENDOR gpumem)
set(CPACK_PACKAGE_CONTACT "gpumem maintainers <gpumem@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "see, explain and control GPU memory: caching allocator, monitor, replay")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE amd64)
set(GPUMEM_DEB_GLIBC 2.34 CACHE INTERNAL "libc6 version the binaries need (GLIBC_ symbols)")
set(GPUMEM_DEB_LIBSTDCXX 11 CACHE INTERNAL "libstdc++6 version the binaries need (GLIBCXX_3.4.29)")
set(GPUMEM_DEB_RUNTIME "libc6 (>= ${GPUMEM_DEB_GLIBC}), libstdc++6 (>= ${GPUMEM_DEB_LIBSTDCXX}), libgcc-s1")

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL gpumem)
set(CPACK_DEBIAN_GPUMEM_PACKAGE_NAME gpumem)
set(CPACK_DEBIAN_GPUMEM_PACKAGE_DEPENDS "${GPUMEM_DEB_RUNTIME}, zlib1g, libncursesw6, libtinfo6")
set(CPACK_DEBIAN_GPUMEM_DESCRIPTION
    "gpumem CLI, libgpumem.so (C ABI and C++ API), libgpumem_monitor.so, headers, CMake and pkg-config files,\n PyTorch shim. The Prometheus exporter is the gpumem-exporter package.")
if(TARGET gpumem-exporter)
  list(APPEND CPACK_COMPONENTS_ALL exporter)
  set(CPACK_DEBIAN_EXPORTER_PACKAGE_NAME gpumem-exporter)
  set(CPACK_DEBIAN_EXPORTER_PACKAGE_DEPENDS
      "gpumem (= ${PROJECT_VERSION}), ${GPUMEM_DEB_RUNTIME}, zlib1g, libncursesw6, libtinfo6, ${GPUMEM_HTTPLIB_PACKAGE}")
  set(CPACK_DEBIAN_EXPORTER_DESCRIPTION
      "gpumem exporter: GPU memory metrics for Prometheus (dcgm-exporter compatible). gpumem-exporter and its\n systemd unit (systemctl enable --now gpumem-exporter).")
endif()
include(CPack)
