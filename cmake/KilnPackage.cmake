# The Debian package of Kiln (scripts/package): the kiln binary, the deploy files and the
# systemd units of the coordinator and the node agent. The version in the package (and its file
# name) is the binary's own (`kiln version`), set by scripts/package at cpack time. Which binary is
# packaged: KILN_PACKAGE_BINARY in the environment at cpack time, else this build's kiln (the
# upgrade drill packages kiln-other-build as a second version).
include(GNUInstallDirs)

install(CODE "
  set(bin \"\$ENV{KILN_PACKAGE_BINARY}\")
  if(NOT bin)
    set(bin \"$<TARGET_FILE:kiln>\")
  endif()
  file(INSTALL DESTINATION \"\${CMAKE_INSTALL_PREFIX}/bin\" TYPE PROGRAM RENAME kiln
       FILES \"\${bin}\")
  # CPACK_STRIP_FILES does not reach a file installed by code: strip it here (debug info is
  # most of a RelWithDebInfo binary).
  execute_process(COMMAND \"${CMAKE_STRIP}\" --strip-unneeded
                          \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/bin/kiln\"
                  RESULT_VARIABLE stripped)
  if(NOT stripped EQUAL 0)
    message(FATAL_ERROR \"strip of the packaged kiln failed\")
  endif()
" COMPONENT kiln)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/deploy/slurm ${PROJECT_SOURCE_DIR}/deploy/prometheus
                  ${PROJECT_SOURCE_DIR}/deploy/agent
        DESTINATION ${CMAKE_INSTALL_DATADIR}/kiln/deploy COMPONENT kiln
        USE_SOURCE_PERMISSIONS)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/systemd/kiln-serve.service
              ${PROJECT_SOURCE_DIR}/deploy/systemd/kiln-agent.service
        DESTINATION lib/systemd/system COMPONENT kiln)
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/docs/preflight.md
              ${PROJECT_SOURCE_DIR}/docs/slurm.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT kiln)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME kiln)
set(CPACK_PACKAGE_VENDOR "Kiln")
set(CPACK_PACKAGE_CONTACT "Kiln developers <kiln@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "distributed training: coordinator, node agent, collectives, kernels, checkpoints")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # kiln_<version>_amd64.deb
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)  # appended to the Depends below
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")  # postinst makes the user kiln
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/deploy/debian/postinst ${PROJECT_SOURCE_DIR}/deploy/debian/prerm
    ${PROJECT_SOURCE_DIR}/deploy/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
