// The one error every checkpoint reader throws (DCP, meshtrain's format, the view over both).
#pragma once

#include <stdexcept>

namespace meshtest {

// Thrown for any unreadable checkpoint; the message names the file and, where known, the key.
class CheckpointError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace meshtest
