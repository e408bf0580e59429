// The building blocks of the log readers (log_lines.h).
#include "readers/log_lines.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace meshtest::log_lines {

std::string too_long_message(std::size_t length) {
  return "line of " + std::to_string(length) + " bytes skipped (longer than " + std::to_string(kMaxLogLineBytes) + ")";
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

namespace {

bool equals_lower(std::string_view text, std::string_view lowercase_word) {
  if (text.size() != lowercase_word.size()) return false;
  for (std::size_t i = 0; i < text.size(); ++i)
    if (lower(text[i]) != lowercase_word[i]) return false;
  return true;
}

// Copies the digits of an integer part to `out`, checking `,` separators sit every 3 digits.
// Returns the number of digits, or -1 when the separators are misplaced.
int take_integer_part(std::string_view text, std::size_t& i, std::string& out) {
  int digits = 0, group = 0;
  bool grouped = false;
  for (; i < text.size() && (is_digit(text[i]) || text[i] == ','); ++i) {
    if (text[i] != ',') {
      out.push_back(text[i]);
      ++digits;
      ++group;
      continue;
    }
    if (group == 0 || (grouped ? group != 3 : group > 3)) return -1;
    grouped = true;
    group = 0;
  }
  if (grouped && group != 3) return -1;
  return digits;
}

int take_digits(std::string_view text, std::size_t& i, std::string& out) {
  int digits = 0;
  for (; i < text.size() && is_digit(text[i]); ++i, ++digits) out.push_back(text[i]);
  return digits;
}

// `clean` is [-]digits[.digits][e[-]digits]; from_chars is locale-independent, strtod covers
// what from_chars calls out of range (overflow to inf, underflow to 0 or a subnormal).
double to_double(const std::string& clean) {
  double value = 0;
  auto result = std::from_chars(clean.data(), clean.data() + clean.size(), value);
  if (result.ec == std::errc::result_out_of_range) value = std::strtod(clean.c_str(), nullptr);
  return value;
}

}  // namespace

bool parse_number(std::string_view token, double& value) {
  std::size_t i = 0;
  bool negative = false;
  if (i < token.size() && (token[i] == '+' || token[i] == '-')) negative = token[i++] == '-';
  std::string_view rest = token.substr(i);
  if (equals_lower(rest, "nan")) {
    value = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  if (equals_lower(rest, "inf") || equals_lower(rest, "infinity")) {
    value = negative ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
    return true;
  }
  std::string clean = negative ? "-" : "";
  int digits = take_integer_part(token, i, clean);
  if (digits < 0) return false;
  if (i < token.size() && token[i] == '.') {
    clean.push_back(token[i++]);
    digits += take_digits(token, i, clean);
  }
  if (digits == 0) return false;
  if (i < token.size() && (token[i] == 'e' || token[i] == 'E')) {
    clean.push_back('e');
    ++i;
    if (i < token.size() && (token[i] == '+' || token[i] == '-')) clean.push_back(token[i++]);
    if (take_digits(token, i, clean) == 0) return false;
  }
  if (i != token.size()) return false;
  value = to_double(clean);
  return true;
}

bool parse_step(std::string_view token, long long& step) {
  double value = 0;
  if (!parse_number(token, value) || !std::isfinite(value) || value != std::floor(value) ||
      std::fabs(value) > 9007199254740992.0)
    return false;
  step = static_cast<long long>(value);
  return true;
}

bool is_not_available(std::string_view token) { return token == "N/A"; }

std::string_view trim_left(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  return text;
}

bool starts_with(std::string_view text, std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; }

std::string_view drop_rank_prefix(std::string_view text, long& rank) {
  rank = -1;
  if (!starts_with(text, "[rank")) return text;
  std::size_t i = 5;
  long number = 0;
  for (; i < text.size() && is_digit(text[i]) && i < 14; ++i) number = number * 10 + (text[i] - '0');
  if (i == 5 || text.substr(i, 2) != "]:") return text;
  rank = number;
  return text.substr(i + 2);
}

std::ifstream open_or_throw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw MetricsError("cannot read " + path);
  return in;
}

}  // namespace meshtest::log_lines
