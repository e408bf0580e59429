# `cmake --install` and the Debian packages (docs/install.md).
#   <prefix>/bin/meshtest                      (component meshtest)
#   <prefix>/share/man/man1/meshtest.1         its --help, every subcommand's
#   <prefix>/share/meshtest/test_matrix/       the shipped matrices
#   <prefix>/share/meshtest/examples/          the example trainers and their matrices
#   <prefix>/share/doc/meshtest/               docs/ (without the reference runs)
#   <prefix>/share/meshtest/data/              the shipped corpora (the examples' and meshtrain's)
#   <prefix>/bin/meshtrain                     (component meshtrain, when built; it reads share/meshtest/data)
include(GNUInstallDirs)

install(TARGETS meshtest RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT meshtest)
install(DIRECTORY test_matrix/ DESTINATION ${CMAKE_INSTALL_DATADIR}/meshtest/test_matrix COMPONENT meshtest)
install(DIRECTORY examples/ DESTINATION ${CMAKE_INSTALL_DATADIR}/meshtest/examples COMPONENT meshtest
        USE_SOURCE_PERMISSIONS PATTERN __pycache__ EXCLUDE)
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT meshtest PATTERN reference-runs EXCLUDE)
install(FILES README.md DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT meshtest)
# The shipped corpora: meshtrain's data and the PyTorch example's (share/meshtest/data).
install(FILES trainer/data/corpus.txt trainer/data/validation.txt
        DESTINATION ${CMAKE_INSTALL_DATADIR}/meshtest/data COMPONENT meshtest)

# The man page is meshtest's own --help, made by the binary just built.
set(MESHTEST_MAN_PAGE ${CMAKE_BINARY_DIR}/meshtest.1)
add_custom_command(OUTPUT ${MESHTEST_MAN_PAGE}
  COMMAND ${CMAKE_COMMAND} -DMESHTEST=$<TARGET_FILE:meshtest> -DOUT=${MESHTEST_MAN_PAGE}
          -DVERSION=${PROJECT_VERSION} -P ${CMAKE_SOURCE_DIR}/cmake/man_page.cmake
  DEPENDS meshtest ${CMAKE_SOURCE_DIR}/cmake/man_page.cmake VERBATIM)
add_custom_target(man_page ALL DEPENDS ${MESHTEST_MAN_PAGE})
install(FILES ${MESHTEST_MAN_PAGE} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT meshtest)

if(MESHTEST_TRAINER)
  install(TARGETS meshtrain RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT meshtrain)
endif()

# ---- Debian packages (cpack): meshtest_<version>_amd64.deb, and meshtrain_... when built ----
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME meshtest)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "meshtest maintainers <meshtest@users.noreply.github.com>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "CI matrix runner for distributed LLM training")
set(CPACK_PACKAGE_DESCRIPTION "meshtest runs a YAML matrix of parallel layouts and checkpoint cases of a
 distributed trainer (torchtitan, PyTorch FSDP2/DCP programs, meshtrain), judges them by their
 loss curves, checkpoint keys and tensors, and writes JUnit, HTML and Markdown reports.")
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/packages)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL meshtest)
if(MESHTEST_TRAINER)
  list(APPEND CPACK_COMPONENTS_ALL meshtrain)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
# RelWithDebInfo, as the cpu preset (ccache serves one from the other); the package is stripped.
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_MESHTEST_PACKAGE_NAME meshtest)
set(CPACK_DEBIAN_MESHTRAIN_PACKAGE_NAME meshtrain)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
# Depends: from the binaries' shared libraries (dpkg-shlibdeps, Debian's dpkg-dev).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# The examples' trainers are Python programs; meshtest itself needs no Python.
set(CPACK_DEBIAN_MESHTEST_PACKAGE_SUGGESTS "python3, python3-torch")
set(CPACK_DEBIAN_MESHTRAIN_PACKAGE_DEPENDS "meshtest (= ${PROJECT_VERSION})")  # its corpora are in meshtest's
include(CPack)
