// meshtest: runs a YAML matrix of distributed-training cases and judges them. This file only
// wires: the trainer adapters, and the subcommands of commands.h.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <vector>

#include "commands.h"
#include "core/matrix.h"
#include "hf_trainer/adapter.h"
#include "megatron/adapter.h"
#include "meshtrain/adapter.h"
#include "torchtitan/adapter.h"
#include "version.h"

using namespace meshtest;

int main(int argc, char** argv) {
  register_meshtrain_adapter(trainer_adapters());
  register_torchtitan_adapter(trainer_adapters());
  register_hf_trainer_adapter(trainer_adapters());
  register_megatron_adapter(trainer_adapters());
  CLI::App app{"meshtest: a matrix runner for distributed-training CI (docs/matrix.md)", "meshtest"};
  app.set_version_flag("--version", std::string("meshtest ") + meshtest_version());
  app.require_subcommand(1);
  const std::vector<Subcommand> subcommands = {add_run(app, argv[0]), add_list(app),
                                               add_show(app),         add_launch(app),
                                               add_slurm_task(app),   add_merge(app),
                                               add_report(app),       add_rerun_failed(app, argv[0]),
                                               add_diff(app),         add_golden(app, argv[0]),
                                               add_ckpt(app),         add_bisect(app),
                                               add_history(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (const auto& [cmd, action] : subcommands)
      if (*cmd) return action();
    return 2;
  } catch (const MatrixError& e) {
    for (const auto& line : e.errors()) std::fprintf(stderr, "%s\n", line.c_str());
    std::fprintf(stderr, "meshtest: %zu error%s in the matrix; nothing was run\n", e.errors().size(),
                 e.errors().size() == 1 ? "" : "s");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "meshtest: %s\n", e.what());
    return 2;
  }
}
