// How often a text occurs in a page, overlapping matches included: what the report tests count.
#pragma once

#include <cstddef>
#include <string>

inline size_t occurrences(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) ++n;
  return n;
}
