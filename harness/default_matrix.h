// The matrix `meshtest run` uses when given none: test_matrix/cpu.yaml, built into
// the binary (harness/default_matrix.cpp.in) so the main job needs no checkout paths.
#pragma once

namespace meshtest {

extern const char* const kDefaultMatrixYaml;
extern const char* const kDefaultMatrixName;  // for file:line:col and relative golden paths

}  // namespace meshtest
