// AdamW, the learning-rate schedule and gradient clipping, with torchtitan's defaults.
// Optimizer state is kept per parameter name, the key the checkpoint uses
// (optimizer.state.<fqn>.exp_avg / exp_avg_sq).
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace meshtrain {

// --lr, --warmup-steps, --max-norm and --optimizer.early-step-in-backward: the peak learning
// rate and its schedule (lr_at), gradient clipping, and whether each bucket's parameters step
// in backward (train.cpp: EarlyStep).
struct OptimizerConfig {
  double lr = 8e-4;
  int64_t warmup_steps = 2;
  double max_norm = 1.0;                // <= 0: no clipping
  bool early_step_in_backward = false;  // needs max_norm <= 0
};
void add_options(CLI::App& cmd, OptimizerConfig& config);

struct AdamWConfig {
  double lr = 8e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

// Decoupled weight decay Adam, the same arithmetic as torch.optim.AdamW: p -= lr*wd*p;
// then the bias-corrected Adam update. With LibTorch 2.x one fused kernel updates every
// parameter (torch.optim.AdamW(fused=True)), on the GPU or, for CPU-offloaded weights, on
// the host over the process's threads; LibTorch 1.13 loops per parameter (foreach=False).
class AdamW {
 public:
  struct State {
    torch::Tensor exp_avg;
    torch::Tensor exp_avg_sq;
  };

  AdamW(std::vector<std::pair<std::string, torch::Tensor>> named_params, AdamWConfig config);
  // Applies one update at learning rate `lr` using each parameter's .grad().
  void step(double lr);
  // The same step in parts (optimizer in backward): begin_step() once, then update() for
  // each group of parameters as their gradients are ready; every parameter once per step.
  // update() takes the registered tensors themselves (not views of them) and ignores those
  // without a gradient.
  void begin_step() { ++step_; }
  void update(double lr, const std::vector<torch::Tensor>& which);
  void zero_grad();

  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t steps) { step_ = steps; }  // when resuming from a checkpoint
  const std::vector<std::pair<std::string, torch::Tensor>>& params() const { return params_; }
  const std::map<std::string, State>& state() const { return state_; }
  // Bytes held by exp_avg and exp_avg_sq on this rank.
  int64_t state_bytes() const;

 private:
  std::vector<std::pair<std::string, torch::Tensor>> params_;
  AdamWConfig config_;
  std::map<std::string, State> state_;
  std::map<const c10::TensorImpl*, size_t> index_of_;  // registered tensor -> its place in params_
  int64_t step_ = 0;
  bool fused_ = false;
  torch::Tensor step_tensor_;  // the fused kernel reads the step count from device memory
};

// torchtitan's linear warmup then linear decay: step s (1-based) of `total`.
// Warmup: lr * s / (warmup + 1). Decay: linear from lr to lr * min_ratio at `total`.
double lr_at(int64_t step, int64_t total, int64_t warmup, double lr, double min_ratio = 0.0);

// Scales gradients whose global norm is `norm` (grad_norm.h: global_grad_norm) so it
// is at most max_norm (the PyTorch rule: coefficient max_norm / (norm + 1e-6), clamped to 1);
// max_norm <= 0 clips nothing.
void clip_grads(const std::vector<torch::Tensor>& params, double norm, double max_norm);

}  // namespace meshtrain
