// Where the shipped corpora are: the only translation unit that knows the source tree's path.
#include "components/data.h"

#include <filesystem>

namespace meshtrain {

namespace {

// An installed meshtrain (cmake --install, the meshtrain package) reads them from
// <prefix>/share/meshtest/trainer/data (share/meshtest mirrors the checkout); a build tree's
// from the source tree.
std::string shipped(const char* name, const char* in_source_tree) {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto installed = exe.parent_path().parent_path() / "share" / "meshtest" / "trainer" / "data" / name;
    if (std::filesystem::exists(installed, ec)) return installed.string();
  }
  return in_source_tree;
}

}  // namespace

std::string shipped_corpus_path() { return shipped("corpus.txt", MESHTRAIN_SHIPPED_CORPUS); }
std::string shipped_validation_corpus_path() { return shipped("validation.txt", MESHTRAIN_SHIPPED_VALIDATION_CORPUS); }

}  // namespace meshtrain
