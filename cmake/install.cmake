# `cmake --install` and the Debian packages (docs/install.md).
#   <prefix>/bin/meshtest                      (component meshtest)
#   <prefix>/share/man/man1/meshtest.1         its --help, every subcommand's
#   <prefix>/share/meshtest/test_matrix/       the shipped matrices
#   <prefix>/share/meshtest/examples/          the example trainers and their matrices
#   <prefix>/share/doc/meshtest/               README.md, docs/, copyright, changelog.gz
#   <prefix>/share/meshtest/trainer/data/      the shipped corpora (the examples' and meshtrain's)
#   <prefix>/share/meshtest/tests/reference/   the independent reference program the CPU matrix runs
#   <prefix>/share/meshtest/sim/               meshtest_sim, with the transport's sources it compiles on first use
#   <prefix>/bin/meshtrain                     (component meshtrain, when built; it reads share/meshtest/trainer/data)
# share/meshtest mirrors the checkout, so a shipped matrix's {matrix_dir}/.. paths hold installed too.
include(GNUInstallDirs)

install(TARGETS meshtest RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT meshtest)
install(DIRECTORY test_matrix/ DESTINATION ${CMAKE_INSTALL_DATADIR}/meshtest/test_matrix COMPONENT meshtest)
install(DIRECTORY examples/ DESTINATION ${CMAKE_INSTALL_DATADIR}/meshtest/examples COMPONENT meshtest
        USE_SOURCE_PERMISSIONS PATTERN __pycache__ EXCLUDE)
# README.md and docs/ as in the checkout, so that their links hold; the reference runs included.
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs COMPONENT meshtest)
install(FILES trainer/data/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR}/trainer/data COMPONENT meshtest)
install(FILES README.md DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT meshtest)
# The shipped corpora (meshtrain's data and the PyTorch example's) and the reference program.
install(FILES trainer/data/corpus.txt trainer/data/validation.txt
        DESTINATION ${CMAKE_INSTALL_DATADIR}/meshtest/trainer/data COMPONENT meshtest)
install(FILES tests/reference/llama_reference.py tests/reference/README.md
        DESTINATION ${CMAKE_INSTALL_DATADIR}/meshtest/tests/reference COMPONENT meshtest)
# meshtest_sim (a PyTorch trainer's simulated world, docs/simulation.md): compiled on first use
# against the trainer's torch from these sources, which share/meshtest keeps where the checkout does.
install(DIRECTORY sim/ DESTINATION ${CMAKE_INSTALL_DATADIR}/meshtest/sim COMPONENT meshtest PATTERN __pycache__ EXCLUDE)
install(FILES trainer/distributed/shm_comm.h trainer/distributed/shm_comm.cpp trainer/distributed/collective.h
        trainer/distributed/collective.cpp DESTINATION ${CMAKE_INSTALL_DATADIR}/meshtest/trainer/distributed COMPONENT meshtest)
install(FILES trainer/base/faults.h trainer/base/faults.cpp
        DESTINATION ${CMAKE_INSTALL_DATADIR}/meshtest/trainer/base COMPONENT meshtest)
install(FILES contract/rank_environment.h DESTINATION ${CMAKE_INSTALL_DATADIR}/meshtest/contract COMPONENT meshtest)

# The man page is meshtest's own --help, made by the binary just built; installed gzipped
# (-n: no name or time stamp inside, so the bytes depend on the text alone), as Debian's are.
set(MESHTEST_MAN_PAGE ${CMAKE_BINARY_DIR}/meshtest.1)
add_custom_command(OUTPUT ${MESHTEST_MAN_PAGE} ${MESHTEST_MAN_PAGE}.gz
  COMMAND ${CMAKE_COMMAND} -DMESHTEST=$<TARGET_FILE:meshtest> -DOUT=${MESHTEST_MAN_PAGE}
          -DVERSION=${PROJECT_VERSION} -P ${CMAKE_SOURCE_DIR}/cmake/man_page.cmake
  COMMAND sh -c "gzip -9n -c '${MESHTEST_MAN_PAGE}' > '${MESHTEST_MAN_PAGE}.gz'"
  DEPENDS meshtest ${CMAKE_SOURCE_DIR}/cmake/man_page.cmake VERBATIM)
add_custom_target(man_page ALL DEPENDS ${MESHTEST_MAN_PAGE}.gz)
install(FILES ${MESHTEST_MAN_PAGE}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT meshtest)

# Each package's copyright and changelog (Debian policy 12.5, 12.7). The changelog's newest entry
# must be this version: a version bump without an entry stops the configure.
file(STRINGS ${CMAKE_SOURCE_DIR}/cmake/debian/changelog changelog_head LIMIT_COUNT 1)
if(NOT changelog_head MATCHES "^meshtest \\(${PROJECT_VERSION}\\) ")
  message(FATAL_ERROR "cmake/debian/changelog starts with '${changelog_head}': add an entry for ${PROJECT_VERSION}")
endif()
set(MESHTEST_CHANGELOG_GZ ${CMAKE_BINARY_DIR}/changelog.gz)
add_custom_command(OUTPUT ${MESHTEST_CHANGELOG_GZ}
  COMMAND sh -c "gzip -9n -c '${CMAKE_SOURCE_DIR}/cmake/debian/changelog' > '${MESHTEST_CHANGELOG_GZ}'"
  DEPENDS ${CMAKE_SOURCE_DIR}/cmake/debian/changelog VERBATIM)
add_custom_target(changelog ALL DEPENDS ${MESHTEST_CHANGELOG_GZ})
set(package_components meshtest)
if(MESHTEST_TRAINER AND NOT MESHTEST_SANITIZE)  # the sanitizer tree's meshtrain is the CPU tree's
  install(TARGETS meshtrain RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT meshtrain)
  list(APPEND package_components meshtrain)
endif()
foreach(component ${package_components})
  install(FILES ${CMAKE_SOURCE_DIR}/cmake/debian/copyright ${MESHTEST_CHANGELOG_GZ}
          DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${component} COMPONENT ${component})
endforeach()

# ---- Debian packages (cpack): meshtest_<version>_amd64.deb, and meshtrain_... when built ----
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME meshtest)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "meshtest maintainers <meshtest@users.noreply.github.com>")
# Each package's Description: its first line is the summary, the rest the extended text (CPack
# indents it). No CPACK_PACKAGE_DESCRIPTION_SUMMARY: CPack would put it above both as theirs.
set(CPACK_DEBIAN_MESHTEST_DESCRIPTION "CI matrix runner for distributed LLM training
meshtest runs a YAML matrix of parallel layouts and checkpoint cases of a
distributed trainer (torchtitan, PyTorch FSDP2/DCP programs, meshtrain),
judges them by their loss curves, checkpoint keys and tensors, and writes
JUnit, HTML and Markdown reports.")
set(CPACK_DEBIAN_MESHTRAIN_DESCRIPTION "LibTorch trainer of a Llama-style model under any device mesh
meshtrain trains a Llama-3-style model under FSDP, tensor, context,
pipeline and expert parallelism on Gloo or NCCL, and saves checkpoints
that reshard on load. meshtest's built-in matrix runs it.")
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
