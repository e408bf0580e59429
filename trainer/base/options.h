// What a component needs to declare its command-line options: CLI11, and options whose text
// is parsed into a typed config field (an enum, a dtype, a set). Each component's
// add_options(CLI::App&, <Its>Config&) lives in its own .cpp; train_config.cpp assembles them.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <utility>

namespace meshtrain {

// `--name TEXT` parsed into `field` by `parse` (which throws std::invalid_argument naming the
// flag and what it accepts: meshtrain reports it like any other bad input, exit 1).
// `default_text` is parsed into `field` now, so --help's default is the default.
template <class T, class Parse>
CLI::Option* add_parsed_option(CLI::App& cmd, const std::string& name, T& field, Parse parse,
                               const std::string& default_text, const std::string& help) {
  field = parse(default_text);
  return cmd
      .add_option_function<std::string>(
          name, [&field, parse](const std::string& text) { field = parse(text); }, help)
      ->default_str(default_text);
}

}  // namespace meshtrain
