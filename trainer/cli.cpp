// meshtrain's command line: each subcommand's options, and its errors as exit codes.
#include "cli.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <fstream>
#include <string>

#include "components/ckpt_tools.h"
#include "fork_server.h"
#include "model/model.h"
#include "train.h"
#include "train_config.h"

namespace {

// Prints the error, and like torchelastic's @record writes it where the launcher asked
// (TORCHELASTIC_ERROR_FILE), so the launcher can say why this rank failed. Returns 1.
int report_failure(const std::string& what) {
  const std::string message = "meshtrain: error: " + what;
  std::fprintf(stderr, "%s\n", message.c_str());
  if (const char* path = std::getenv("TORCHELASTIC_ERROR_FILE"); path && *path) {
    const nlohmann::json record = {
        {"message", {{"message", message}, {"extraInfo", {{"timestamp", std::to_string(std::time(nullptr))}}}}}};
    std::ofstream(path) << record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  return 1;
}

}  // namespace

int meshtrain_main(int argc, char** argv) {
  using namespace meshtrain;
  CLI::App app{"meshtrain: a Llama-3-style trainer for any device mesh (docs/meshtrain.md)", "meshtrain"};
  app.require_subcommand(1);
  TrainConfig train_config;
  auto* train_cmd = app.add_subcommand("train",
                                       "Train and write metrics.jsonl, state_dict_keys.json, "
                                       "param_digest.json and rank<R>.json to --dump-folder");
  add_options(*train_cmd, train_config);

  TrainConfig generate_config;
  generate_config.generate.emplace();
  auto* generate_cmd =
      app.add_subcommand("generate",
                         "Load a checkpoint under any mesh (--checkpoint.folder, --checkpoint.load-step) and "
                         "greedy-decode; writes generate.json to --dump-folder");
  add_options(*generate_cmd, generate_config);
  add_options(*generate_cmd, *generate_config.generate);

  // Looking inside a checkpoint (inspect, diff) is meshtest's: `meshtest ckpt inspect|diff` reads
  // this format without LibTorch. What needs the trainer's reader and LibTorch stays here.
  auto* ckpt_cmd = app.add_subcommand(
      "ckpt", "Write a checkpoint out: consolidate (to look inside one: meshtest ckpt inspect|diff)");
  ckpt_cmd->require_subcommand(1);
  std::string ckpt_a, ckpt_out;
  auto* consolidate_cmd = ckpt_cmd->add_subcommand("consolidate", "Whole tensors into one .safetensors file");
  consolidate_cmd->add_option("STEP_DIR", ckpt_a, "step-<N> folder")->required();
  consolidate_cmd->add_option("OUT", ckpt_out, "Output .safetensors path")->required();
  std::string hf_model;
  consolidate_cmd->add_option("--hf", hf_model,
                              "Model flavor: write Hugging Face LlamaForCausalLM names and layout, and config.json");

  bool describe_as_json = false;
  auto* describe_cmd = app.add_subcommand("describe",
                                          "What a harness needs to know: flavors, their dimensions, "
                                          "and what a tensor-parallel degree must divide");
  describe_cmd->add_flag("--json", describe_as_json, "As JSON (the only form)")->required();

  // meshtest's, not a person's (no help group): ranks as forks of this process (fork_server.h).
  int fork_socket = -1;
  auto* fork_cmd = app.add_subcommand("forkserver", "Start ranks as forks of this process, asked on a socket");
  fork_cmd->group("");
  fork_cmd->add_option("--fd", fork_socket, "The SOCK_SEQPACKET socket meshtest asks on")->required();

  // Syntax errors exit 2; a value an option's parser refuses (std::invalid_argument) is bad
  // input like any other: exit 1, recorded for the launcher.
  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
      return app.exit(e);
    } catch (const CLI::ParseError& e) {
      std::fprintf(stderr, "meshtrain: error: %s (see meshtrain --help)\n", e.what());
      return 2;
    }
    if (train_cmd->parsed()) return train(train_config);
    if (fork_cmd->parsed()) return meshtrain::serve_forks(fork_socket, meshtrain_main);
    if (describe_cmd->parsed()) return std::printf("%s\n", describe_json().c_str()) < 0;
    if (consolidate_cmd->parsed()) return ckpt_consolidate(ckpt_a, ckpt_out, hf_model), 0;
    if (generate_cmd->parsed()) {
      generate_config.checkpoint.enable = true;
      generate_config.checkpoint.exclude_from_loading = {"optimizer", "lr_scheduler", "dataloader"};  // weights only
      return train(generate_config);
    }
  } catch (const c10::Error& e) {
    return report_failure(e.what_without_backtrace());
  } catch (const std::exception& e) {
    return report_failure(e.what());
  }
  return 0;
}
