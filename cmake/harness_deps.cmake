# The harness's outside libraries (no LibTorch): yaml-cpp, Boost.Process, pugixml.
# Included by the main build and by the fuzz-only build.
find_package(yaml-cpp REQUIRED)
# Boost.Process v1 needs Boost.Filesystem (Debian 12's 1.74), or from 1.77 on can use
# std::filesystem instead (the GPU image ships Boost headers without the library).
find_package(Boost 1.74 REQUIRED OPTIONAL_COMPONENTS filesystem)
if(TARGET Boost::filesystem)
  set(BOOST_PROCESS_TARGET Boost::filesystem)
elseif(Boost_VERSION VERSION_GREATER_EQUAL 1.77)
  add_library(boost_process_std_fs INTERFACE)
  target_link_libraries(boost_process_std_fs INTERFACE Boost::headers)
  target_compile_definitions(boost_process_std_fs INTERFACE BOOST_PROCESS_USE_STD_FS)
  set(BOOST_PROCESS_TARGET boost_process_std_fs)
else()
  message(FATAL_ERROR "Boost ${Boost_VERSION} lacks Boost.Filesystem: install libboost-filesystem-dev")
endif()
# yaml-cpp 0.7 (Debian 12) exports `yaml-cpp`; 0.8 exports `yaml-cpp::yaml-cpp`.
if(TARGET yaml-cpp::yaml-cpp)
  set(YAML_CPP_TARGET yaml-cpp::yaml-cpp)
else()
  set(YAML_CPP_TARGET yaml-cpp)
endif()
# pugixml: Debian's package, or headers and a static library carried to the GPU
# image in .deps/pugixml (ci/gpu-build.sh says how).
find_package(pugixml QUIET)
if(NOT TARGET pugixml)
  find_path(PUGIXML_INCLUDE_DIR pugixml.hpp HINTS ${CMAKE_SOURCE_DIR}/.deps/pugixml/include REQUIRED)
  find_library(PUGIXML_LIBRARY NAMES libpugixml.a pugixml HINTS ${CMAKE_SOURCE_DIR}/.deps/pugixml/lib REQUIRED)
  add_library(pugixml UNKNOWN IMPORTED)
  set_target_properties(pugixml PROPERTIES IMPORTED_LOCATION ${PUGIXML_LIBRARY}
                        INTERFACE_INCLUDE_DIRECTORIES ${PUGIXML_INCLUDE_DIR})
endif()
# SQLite (the run history): Debian's libsqlite3-dev, or its header and static library carried
# to the GPU image in .deps/sqlite (as pugixml).
find_package(SQLite3 QUIET)
if(NOT TARGET SQLite::SQLite3)
  find_path(SQLITE3_INCLUDE_DIR sqlite3.h HINTS ${CMAKE_SOURCE_DIR}/.deps/sqlite/include REQUIRED)
  find_library(SQLITE3_LIBRARY NAMES libsqlite3.a sqlite3 HINTS ${CMAKE_SOURCE_DIR}/.deps/sqlite/lib REQUIRED)
  add_library(SQLite::SQLite3 UNKNOWN IMPORTED)
  set_target_properties(SQLite::SQLite3 PROPERTIES IMPORTED_LOCATION ${SQLITE3_LIBRARY}
                        INTERFACE_INCLUDE_DIRECTORIES ${SQLITE3_INCLUDE_DIR} INTERFACE_LINK_LIBRARIES "dl;m;Threads::Threads")
endif()
