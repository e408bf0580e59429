// How often a text occurs in another (a page, a log, a report), overlapping matches included.
#pragma once

#include <cstddef>
#include <string>

inline size_t occurrences(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) ++n;
  return n;
}
