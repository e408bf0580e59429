// `meshtrain ckpt`: look inside a checkpoint's step folder without starting a job.
#pragma once

#include <ostream>
#include <string>

namespace meshtrain {

// Keys, dtypes, global shapes, chunk counts and bytes, the writer's mesh.
void ckpt_inspect(const std::string& step_dir, std::ostream& out);
// Keys and shapes only in one of two checkpoints; returns 0 when they agree, 1 otherwise.
int ckpt_diff(const std::string& a, const std::string& b, std::ostream& out);
// Every tensor, whole, into one safetensors file (readable by Python's `safetensors`).
// With `hf_model` (a flavor name): model weights only, with Hugging Face Llama names and
// q/k rows reordered for its rotary layout, plus config.json in OUT's folder.
void ckpt_consolidate(const std::string& step_dir, const std::string& out_path, const std::string& hf_model = "");

}  // namespace meshtrain
