// `meshtrain ckpt consolidate`: a checkpoint's step folder out as one safetensors file, read
// through the same checksummed reader a job uses. Looking inside a checkpoint (inspect, diff)
// is `meshtest ckpt`'s (harness/ckpt_cli.h), which reads the format without LibTorch.
#pragma once

#include <string>

namespace meshtrain {

// Every tensor, whole, into one safetensors file (readable by Python's `safetensors`).
// With `hf_model` (a flavor name): model weights only, with Hugging Face Llama names and
// q/k rows reordered for its rotary layout, plus config.json in OUT's folder.
void ckpt_consolidate(const std::string& step_dir, const std::string& out_path, const std::string& hf_model = "");

}  // namespace meshtrain
