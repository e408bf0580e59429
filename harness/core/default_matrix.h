// The matrix `meshtest run` uses when given none: test_matrix/cpu.yaml, built into
// the binary (harness/default_matrix.cpp.in) so the main job names no matrix file. Its
// golden files, helper scripts and the reference program are read from the folder
// default_matrix_name() is in ({matrix_dir}; relative golden paths resolve against it).
#pragma once

#include <string>

namespace meshtest {

extern const char* const kDefaultMatrixYaml;

// Where the built-in matrix says it comes from (file:line:col, {matrix_dir}): an installed
// meshtest's <prefix>/share/meshtest/test_matrix/cpu.yaml, which mirrors the checkout
// (examples/, tests/reference/, trainer/data/ beside it), else the source tree's file.
std::string default_matrix_name();

}  // namespace meshtest
