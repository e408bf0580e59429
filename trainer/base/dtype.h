// The dtypes meshtrain's options name (--param-dtype, --reduce-dtype, --checkpoint.export-dtype):
// one parser, so every option accepts the same words and refuses the rest alike.
#pragma once

#include <torch/torch.h>

#include <stdexcept>
#include <string>

namespace meshtrain {

// "float32" | "bfloat16"; throws std::invalid_argument naming the known ones.
inline torch::ScalarType parse_dtype(const std::string& s) {
  if (s == "float32") return torch::kFloat32;
  if (s == "bfloat16") return torch::kBFloat16;
  throw std::invalid_argument("unknown dtype '" + s + "' (known: float32, bfloat16)");
}

}  // namespace meshtrain
