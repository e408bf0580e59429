#include "readers/rank_files.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "readers/log_lines.h"

namespace meshtest {

namespace fs = std::filesystem;

std::string rank_log_path(const std::string& dir, int rank) {
  return (fs::path(dir) / ("rank" + std::to_string(rank) + ".log")).string();
}

std::string rank_error_file(const std::string& dir, int rank) {
  return (fs::path(dir) / ("error_rank" + std::to_string(rank) + ".json")).string();
}

std::string rank_collective_file(const std::string& dir, int rank) {
  return (fs::path(dir) / ("collectives_rank" + std::to_string(rank) + ".txt")).string();
}

std::string tail_of_file(const std::string& path, int lines, size_t max_bytes) {
  // Only a regular file: opening a FIFO would block the caller (a report) forever.
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return "";
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "";
  const std::streamoff size = in.tellg();
  if (size < 0) return "";
  const std::streamoff start = std::max<std::streamoff>(0, size - static_cast<std::streamoff>(max_bytes));
  in.seekg(start);
  std::string text(static_cast<size_t>(size - start), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  size_t end = text.size();
  if (end > 0 && text[end - 1] == '\n') --end;  // a final newline does not start a line
  int seen = 0;
  for (size_t i = end; i-- > 0;)
    if (text[i] == '\n' && ++seen == lines) return text.substr(i + 1);
  return text;
}

namespace {

std::string error_file_message(const std::string& error_file) {
  std::ifstream in(error_file);
  if (!in) return "";
  try {
    const auto j = nlohmann::json::parse(in);
    // torchelastic's two formats: {"message": {"message": "...", ...}} and {"message": "..."}.
    const auto& m = j.at("message");
    return m.is_string() ? m.get<std::string>() : m.at("message").get<std::string>();
  } catch (const std::exception&) {
    return "";
  }
}

std::string trimmed(const std::string& line) {
  const size_t first = line.find_first_not_of(" \t");
  return first == std::string::npos ? "" : line.substr(first, line.find_last_not_of(" \t\r") - first + 1);
}

// Python's faulthandler on a fatal signal writes "Fatal Python error: Segmentation fault", then
// each thread's frames, the crashing one first and innermost first, then the extension modules:
// no line after it names the error, and a frame's path may ("errors/__init__.py"). The error is
// that line with the crashing thread's innermost frame.
std::string fatal_python_error(const std::string& tail) {
  const size_t at = tail.rfind("Fatal Python error: ");
  if (at == std::string::npos) return "";
  std::istringstream lines(tail.substr(at));
  std::string fatal, line;
  std::getline(lines, fatal);
  while (std::getline(lines, line))
    if (line.find("(most recent call first)") != std::string::npos) {
      if (std::getline(lines, line) && trimmed(line).rfind("File ", 0) == 0)
        return trimmed(fatal) + " (innermost: " + trimmed(line) + ")";
      break;
    }
  return trimmed(fatal);
}

// A Python traceback's frame line, `  File "...", line N, in f`, bare or as torch prefixes a
// rank's uncaught exception (`[rank1]:   File ...`).
bool is_frame_line(const std::string& line) {
  long rank = -1;
  const std::string_view rest = log_lines::drop_rank_prefix(log_lines::trim_left(line), rank);
  return log_lines::starts_with(log_lines::trim_left(rest), "File \"");
}

// The last log line that names an error: a Python traceback ends with one, meshtrain
// prints "meshtrain: error: ...", most C++ trainers print something like it. A traceback's
// frame lines do not count (their paths may say "error").
std::string last_error_line(const std::string& log) {
  if (std::string fatal = fatal_python_error(tail_of_file(log, 200)); !fatal.empty()) return fatal;
  std::istringstream lines(tail_of_file(log, 40));
  std::string found;
  for (std::string line; std::getline(lines, line);) {
    std::string lower = line;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    if (lower.find("error") != std::string::npos && !is_frame_line(line)) found = line;
  }
  return found;
}

}  // namespace

std::string rank_error_message(const std::string& dir, int rank) {
  const std::string recorded = error_file_message(rank_error_file(dir, rank));
  return recorded.empty() ? last_error_line(rank_log_path(dir, rank)) : recorded;
}

std::string ranks_not_arrived(const std::string& dir, int nproc, int* behind) {
  // Per rank: collectives entered (none without a file) and the last one, "OP group=G ranks=K".
  std::vector<long long> entered(static_cast<size_t>(std::max(nproc, 0)), 0);
  std::vector<std::string> last(entered.size());
  bool any = false;
  for (int r = 0; r < nproc; ++r) {
    std::ifstream in(rank_collective_file(dir, r));
    std::string line;
    const auto at = std::getline(in, line) ? line.find(" last=") : std::string::npos;
    if (at == std::string::npos || std::sscanf(line.c_str(), "collectives_entered=%lld", &entered[r]) != 1) continue;
    any = true;
    last[r] = line.substr(at + 6, line.find_last_not_of(' ') - at - 5);
  }
  if (!any) return "";
  const long long most = *std::max_element(entered.begin(), entered.end());
  std::vector<int> late, waiting;
  for (int r = 0; r < nproc; ++r) (entered[r] < most ? late : waiting).push_back(r);
  if (late.empty()) return "";
  *behind = late.front();
  auto listed = [](const std::vector<int>& ranks) {
    std::string text = ranks.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < ranks.size(); ++i) text += (i ? "," : "") + std::to_string(ranks[i]);
    return text;
  };
  std::string said = listed(late) + " did not arrive: " + listed(waiting) + (waiting.size() == 1 ? " waits" : " wait") +
                     " in collective #" + std::to_string(most) + " (" + last[waiting.front()] + ");";
  for (int r : late) said += " rank " + std::to_string(r) + " entered " + std::to_string(entered[r]);
  return said;
}

bool lost_port_race(const std::string& log_dir, int nproc) {
  for (int rank = 0; rank < nproc; ++rank) {
    const std::string tail = tail_of_file(rank_log_path(log_dir, rank), 40);
    if (tail.find("Address already in use") != std::string::npos || tail.find("EADDRINUSE") != std::string::npos)
      return true;
  }
  return false;
}

}  // namespace meshtest
