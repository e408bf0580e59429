#include "core/selection.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>
#include <stdexcept>

#include "core/default_matrix.h"
#include "core/adapters.h"
#include "core/plan.h"
#include "core/shell_words.h"

namespace meshtest {

namespace {

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

bool chosen_by_filters(const Case& c, const Selection& s) {
  auto any = [](const std::vector<std::string>& values, auto pred) {
    return values.empty() || std::any_of(values.begin(), values.end(), pred);
  };
  return any(s.ids, [&](const auto& id) { return c.id == id; }) &&
         any(s.keywords, [&](const auto& k) { return contains(c.id, k); }) &&
         any(s.tags, [&](const auto& t) { return std::find(c.tags.begin(), c.tags.end(), t) != c.tags.end(); }) &&
         std::none_of(s.excludes.begin(), s.excludes.end(), [&](const auto& x) { return contains(c.id, x); });
}

}  // namespace

std::vector<Suite> load_matrices(const std::vector<std::string>& files) {
  std::vector<Suite> suites;
  if (files.empty()) {
    suites.push_back(load_suite_text(kDefaultMatrixYaml, default_matrix_name()));
    return suites;
  }
  std::vector<std::string> errors;
  for (const auto& f : files) {
    try {
      suites.push_back(load_suite_file(f));
    } catch (const MatrixError& e) {
      errors.insert(errors.end(), e.errors().begin(), e.errors().end());
    }
  }
  if (!errors.empty()) throw MatrixError(errors);
  validate_suites(suites);
  return suites;
}

std::vector<const Case*> select_cases(const std::vector<Suite>& suites, const Selection& s) {
  std::map<std::string, const Case*> by_id;
  std::vector<const Case*> all;
  for (const auto& suite : suites)
    for (const auto& c : suite.cases) all.push_back(&c), by_id[c.id] = &c;
  for (const auto& id : s.ids)
    if (!by_id.count(id)) throw std::invalid_argument("--id '" + id + "' names no case (meshtest list shows them)");
  std::set<std::string> chosen;
  for (const Case* c : all)
    if (chosen_by_filters(*c, s)) chosen.insert(c->id);
  for (bool grew = true; grew;) {  // baselines, transitively
    grew = false;
    for (const auto& id : std::vector<std::string>(chosen.begin(), chosen.end()))
      for (const auto& b : by_id[id]->baselines())
        if (chosen.insert(b).second) grew = true;
  }
  std::vector<const Case*> out;
  for (const Case* c : all)
    if (chosen.count(c->id)) out.push_back(c);
  return out;
}

std::vector<const Case*> select_shard(const std::vector<Suite>& suites, const Selection& s, const RunOptions& options,
                                      const std::map<std::string, double>& durations) {
  const std::vector<const Case*> selected = select_cases(suites, s);
  if (s.shard.empty()) return selected;
  int index = 0, count = 0;
  char slash = 0;
  std::istringstream in(s.shard);
  if (!(in >> index >> slash >> count) || slash != '/' || count < 1 || index < 1 || index > count || !in.eof())
    throw std::invalid_argument("--shard '" + s.shard + "' must be I/N with 1 <= I <= N");
  return shard_cases(plan_run(selected, options, durations), index, count);
}

std::string listing_line(const Case& c) {
  std::string tags, needs;
  for (const auto& x : c.tags) tags += (tags.empty() ? "  tags=" : ",") + x;
  for (const auto& r : c.requirements) needs += (needs.empty() ? "  requires: " : "; ") + r.describe();
  char head[512];
  std::snprintf(head, sizeof head, "%-50s ngpu=%d%s phases=%zu expect=", c.id.c_str(), c.ngpu,
                c.simulated ? " simulated" : "", c.phases.size());
  return head + c.expect.str() + tags + needs;
}

nlohmann::json shown_case(const Case& c) {
  auto j = c.to_json();
  const std::string case_dir = case_folder("meshtest-out", c);
  for (size_t i = 0; i < c.phases.size(); ++i)
    j["phases"][i]["command"] =
        join_argv(resolve_argv(c.phases[i].argv, {backend_of(c, "gloo"), case_dir, case_dir + "/" + c.phases[i].name,
                                                  trainer_adapters().placeholders()}));
  return j;
}

}  // namespace meshtest
