# Install-time part of `cmake --install` (component exporter): deploy/exporter/gpumem-exporter.service with
# ExecStart naming the installed gpumem, as P/lib/systemd/system/gpumem-exporter.service. The prefix is known
# only now: --prefix, or /usr when CPack stages the .deb (under DESTDIR, which file(INSTALL) adds).
# Set by packaging/CMakeLists.txt: GPUMEM_UNIT_SOURCE, GPUMEM_UNIT_STAGED, GPUMEM_UNIT_BINDIR.
file(READ "${GPUMEM_UNIT_SOURCE}" unit)
string(REPLACE "ExecStart=/usr/local/bin/gpumem " "ExecStart=${CMAKE_INSTALL_PREFIX}/${GPUMEM_UNIT_BINDIR}/gpumem "
       unit "${unit}")
if(NOT unit MATCHES "ExecStart=${CMAKE_INSTALL_PREFIX}/")
  message(FATAL_ERROR "${GPUMEM_UNIT_SOURCE}: no ExecStart=/usr/local/bin/gpumem to point at the installed gpumem")
endif()
file(WRITE "${GPUMEM_UNIT_STAGED}" "${unit}")
file(INSTALL DESTINATION "${CMAKE_INSTALL_PREFIX}/lib/systemd/system" TYPE FILE FILES "${GPUMEM_UNIT_STAGED}")
