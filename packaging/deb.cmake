# `make deb`: the `cmake --install` tree under /usr as a Debian package (CPack's DEB generator), binaries
# stripped. Depends: the runtime packages of what the binaries link (ldd build/gpumem build/libgpumem.so);
# the lowest versions are the highest symbol versions they use (objdump -T: GLIBC_2.34, GLIBCXX_3.4.29 =
# GCC 11; tests/packaging checks them against the built binaries). gpumem-exporter's cpp-httplib is only
# recommended: gpumem itself runs without it, and `gpumem exporter` says so when it is missing.
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
set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "libc6 (>= ${GPUMEM_DEB_GLIBC}), libstdc++6 (>= ${GPUMEM_DEB_LIBSTDCXX}), libgcc-s1, zlib1g, libncursesw6, libtinfo6")
if(TARGET gpumem-exporter)
  set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libcpp-httplib0.11")
endif()
include(CPack)
