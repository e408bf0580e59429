// What a machine must have for a case to run, and the one place where a case becomes a
// skip because this machine lacks it: `requires:` probes (docs/matrix.md#requirements)
// and --skip-tag.
//
// probe_requirements() runs each distinct probe of the given cases once per call (a probe
// is keyed by its resolved argv, its folder and its timeout), all of them at once, each from
// its matrix file's folder, in meshtest's environment with stdin closed, in a process group
// of its own that is killed when its timeout passes. It never throws for a probe: one that
// cannot start, exits non-zero, dies or times out is unmet, with a one-line why (the last
// line of its stderr, else of its stdout, else how it ended). `gpus: N` runs nothing: it is
// met on the nccl backend with at least N devices in the pool, never on gloo.
//
// skip_cases() gives each named case expectation skip with its reason, and every case judged
// against it (a check's `baseline`), transitively: "baseline X skipped (<reason>)". A case
// already `expect: skip` keeps its own reason. Nothing here fails a case.
#pragma once

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "core/matrix.h"

namespace meshtest {

// What `gpus:` is judged against.
struct ProbeHost {
  std::string backend = "gloo";
  int devices = 0;  // the run's pool: --ngpu, or detected
};

struct ProbeReport {
  std::map<std::string, std::string> skips;  // case id -> why it must be skipped (its first unmet requirement)
  int probes_run = 0;                        // processes started (distinct probes; gpus starts none)
  std::vector<std::string> unmet;            // each unmet probe, as its default reason, in first-seen order
  double seconds = 0;
};

// The requirements of `cases` (declaration order; the first unmet one of a case names it).
// Cases already `expect: skip` are not probed.
ProbeReport probe_requirements(const std::vector<const Case*>& cases, const ProbeHost& host);

// The reason a case is skipped for: `reason (why)` when the matrix gave one, else
// `requires <probe>: why`.
std::string unmet_reason(const Requirement& r, const std::string& why);

// Skips every case in `reasons` (id -> reason) and, transitively, the cases judged against them.
// Returns how many cases it skipped.
size_t skip_cases(std::vector<Suite>& suites, const std::map<std::string, std::string>& reasons);

// --skip-tag TAG[=REASON]: cases with the tag are skipped ("--skip-tag TAG: REASON"), through
// skip_cases. Throws std::invalid_argument for a spec without a tag; notes a tag no case has.
void apply_skip_tags(std::vector<Suite>& suites, const std::vector<std::string>& specs, std::FILE* notes = stderr);

// `meshtest run`: probes the requirements of `selected` (cases of `suites`) and skips the
// cases whose requirements are unmet, with the cases judged against them. Says on `log` what
// it probed and what was unmet (nothing when no case has requirements).
ProbeReport apply_requirements(std::vector<Suite>& suites, const std::vector<const Case*>& selected,
                               const ProbeHost& host, std::FILE* log = stderr);

// Cases whose command runs an adapter's program that cannot run here (its program_problem(),
// e.g. a meshtest installed without meshtrain) are skipped with that problem as the reason, and
// the cases judged against them; one line on `log` says so. When that is every selected case
// still to run, throws std::runtime_error with the problem instead: nothing could be judged.
size_t apply_program_problems(std::vector<Suite>& suites, const std::vector<const Case*>& selected,
                              std::FILE* log = stderr);

// The memory of this machine's smallest GPU in bytes, for simulated worlds (one GPU holds
// all of a world's ranks): $MESHTEST_GPU_MEMORY_GB when set, else what nvidia-smi says; 0
// when neither can tell (then nothing is refused for memory).
double smallest_gpu_memory_bytes();

// The pool `run` packs cases onto when --ngpu is not given: for nccl, the GPUs meshtest may
// use (CUDA_VISIBLE_DEVICES, else /dev/nvidia<N>); for gloo, max(8, cores) CPU rank slots,
// since ranks mostly wait on each other and a small machine still takes an 8-rank case.
int default_devices(const std::string& backend);

}  // namespace meshtest
