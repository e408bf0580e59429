// Where a test finds the programs it runs and the folders it reads, as CMake built them.
// The values live in one translation unit that tests/CMakeLists.txt generates
// (build/<preset>/tests/test_paths.cpp), not in -D flags: no test's compile line names the
// checkout, so ccache serves a second clone's tests from what the first one compiled.
#pragma once

namespace test_paths {
extern const char* const kSourceDir;    // the checkout
extern const char* const kMeshtest;     // build/<preset>/meshtest
extern const char* const kMeshtrain;    // build/<preset>/meshtrain
extern const char* const kFakeTrainer;  // build/<preset>/tests/fake_trainer
extern const char* const kBinaryDir;    // build/<preset>
}  // namespace test_paths

#define MESHTEST_SOURCE_DIR ::test_paths::kSourceDir
#define MESHTEST_BIN ::test_paths::kMeshtest
#define MESHTRAIN_BIN ::test_paths::kMeshtrain
#define FAKE_TRAINER_BIN ::test_paths::kFakeTrainer
