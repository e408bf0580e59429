// `meshtest bisect`: from a case that fails at BAD and passes at GOOD to the first
// commit where it fails. It drives `git bisect` over the repository; at every commit it
// runs the build command (a commit that does not build is skipped) and then the one case
// exactly as `meshtest run --id` would, judged by a copy of this meshtest taken at the
// start so that the judge never changes under the bisect. A case that passes only on a
// retry is flaky: reported and skipped, never counted good. Both ends are checked before
// bisecting. The repository ends on the commit (or branch) it started on, also after
// SIGINT or SIGTERM.
#pragma once

#include <string>
#include <vector>

namespace meshtest {

struct BisectOptions {
  std::string case_id;
  std::string good;
  std::string bad = "HEAD";
  std::string build;                  // shell command in the repository root; "" = build nothing
  std::string repo = ".";             // any folder inside the work tree
  std::vector<std::string> matrices;  // as `meshtest run` takes them (default: the built-in one)
  std::string out;                    // "" = a fresh folder under $TMPDIR
  std::string backend = "gloo";
  int ngpu = -1;          // -1: `meshtest run`'s default
  std::string meshtrain;  // "" = the one next to this meshtest, if there is one
  int retries = 1;        // a case that fails, then passes on a retry, is flaky
  // --drift: a commit is bad when the case's loss curve left the band around its numbers at GOOD
  // (the run history's rule with GOOD as the one reference: docs/history.md), passing or not;
  // for a drift that stays inside every tolerance.
  bool drift = false;
  bool json = false;  // the result as one JSON document on stdout
};

// The default --build: meshtest's own CPU build into its reused build/cpu folder.
extern const char* const kDefaultBisectBuild;

// 0: the first bad commit was found. 1: it could not be (the case passes at BAD, fails at
// GOOD, or only skipped commits are left). 128 + signal when interrupted.
int bisect(const BisectOptions& options);

}  // namespace meshtest
