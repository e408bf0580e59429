// meshtest's version, as `meshtest --version` prints it: the project version and, in a build
// from a git checkout, `git describe` of the commit it was configured at ("0.4.0 (git 889b93c)").
#pragma once

namespace meshtest {
const char* meshtest_version();
}  // namespace meshtest
