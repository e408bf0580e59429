// The matrix `meshtest run` uses when given none: test_matrix/cpu.yaml, built into
// the binary (harness/default_matrix.cpp.in) so the main job names no matrix file. Its
// golden files and the reference program are still read from the source tree it was
// built from ({matrix_dir} and relative golden paths resolve against kDefaultMatrixName).
#pragma once

namespace meshtest {

extern const char* const kDefaultMatrixYaml;
extern const char* const kDefaultMatrixName;  // the source file's absolute path: file:line:col, {matrix_dir}

}  // namespace meshtest
