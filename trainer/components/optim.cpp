#include "components/optim.h"

#include <cmath>

#include "base/compat.h"
#include "base/options.h"

namespace meshtrain {

void add_options(CLI::App& cmd, OptimizerConfig& c) {
  cmd.add_option("--lr", c.lr, "Peak learning rate (AdamW)")->capture_default_str();
  cmd.add_option("--warmup-steps", c.warmup_steps, "Linear warmup steps, then linear decay")->capture_default_str();
  cmd.add_option("--max-norm", c.max_norm, "Clip gradients to this global L2 norm (0: no clipping)")
      ->capture_default_str();
  cmd.add_flag("--optimizer.early-step-in-backward", c.early_step_in_backward,
               "Optimizer in backward: each data-parallel bucket's parameters take their AdamW step as soon as their "
               "reduced gradients are ready, and the gradients are freed (needs --max-norm 0 and no accumulation)");
}

AdamW::AdamW(std::vector<std::pair<std::string, torch::Tensor>> named_params, AdamWConfig config)
    : params_(std::move(named_params)), config_(config) {
  for (const auto& [name, p] : params_)
    state_[name] = State{torch::zeros_like(p, torch::kFloat32), torch::zeros_like(p, torch::kFloat32)};
  // One fused kernel over every parameter: on the GPU, and on the host for offloaded
  // weights (LibTorch 2.x's CPU kernel runs over --threads cores).
  fused_ = compat::kHasFusedAdamW && !params_.empty();
  for (const auto& [name, p] : params_)
    fused_ =
        fused_ && p.device().type() == params_.front().second.device().type() && p.scalar_type() == torch::kFloat32;
  if (fused_) step_tensor_ = torch::zeros({}, params_.front().second.options());
  for (size_t i = 0; i < params_.size(); ++i) index_of_[params_[i].second.unsafeGetTensorImpl()] = i;
}

void AdamW::step(double lr) {
  begin_step();
  std::vector<torch::Tensor> all;
  for (const auto& [name, p] : params_) all.push_back(p);
  update(lr, all);
}

void AdamW::update(double lr, const std::vector<torch::Tensor>& which) {
  torch::NoGradGuard no_grad;
  std::vector<std::pair<std::string, torch::Tensor>> chosen;
  for (const auto& t : which) {
    const auto& [name, p] = params_.at(index_of_.at(t.unsafeGetTensorImpl()));
    chosen.emplace_back(name, p);
  }
  const double bias1 = 1.0 - std::pow(config_.beta1, static_cast<double>(step_));
  const double bias2 = 1.0 - std::pow(config_.beta2, static_cast<double>(step_));
  const double step_size = lr / bias1;
  const double bias2_sqrt = std::sqrt(bias2);
  if (fused_) {
    std::vector<torch::Tensor> ps, grads, exp_avgs, exp_avg_sqs, steps;
    for (auto& [name, p] : chosen) {
      if (!p.grad().defined()) continue;
      ps.push_back(p), grads.push_back(p.grad());
      exp_avgs.push_back(state_.at(name).exp_avg), exp_avg_sqs.push_back(state_.at(name).exp_avg_sq);
      steps.push_back(step_tensor_);
    }
    if (ps.empty()) return;  // the fused kernel needs at least one tensor
    step_tensor_.fill_(static_cast<double>(step_));
    compat::fused_adamw(ps, grads, exp_avgs, exp_avg_sqs, steps, lr, config_.beta1, config_.beta2, config_.weight_decay,
                        config_.eps);
    return;
  }
  for (auto& [name, p] : chosen) {
    auto grad = p.grad();
    if (!grad.defined()) continue;
    auto& s = state_.at(name);
    p.mul_(1.0 - lr * config_.weight_decay);
    s.exp_avg.lerp_(grad, 1.0 - config_.beta1);
    s.exp_avg_sq.mul_(config_.beta2).addcmul_(grad, grad, 1.0 - config_.beta2);
    auto denom = (s.exp_avg_sq.sqrt() / bias2_sqrt).add_(config_.eps);
    p.addcdiv_(s.exp_avg, denom, -step_size);
  }
}

void AdamW::zero_grad() {
  for (auto& [name, p] : params_) {
    auto& g = p.mutable_grad();
    if (g.defined()) g = torch::Tensor();
  }
}

int64_t AdamW::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& [name, s] : state_) bytes += s.exp_avg.nbytes() + s.exp_avg_sq.nbytes();
  return bytes;
}

double lr_at(int64_t step, int64_t total, int64_t warmup, double lr, double min_ratio) {
  if (step <= warmup) return lr * static_cast<double>(step) / static_cast<double>(warmup + 1);
  const int64_t decay_steps = std::max<int64_t>(1, total - warmup);
  const double progress = static_cast<double>(step - warmup - 1) / static_cast<double>(decay_steps);
  return lr * (min_ratio + (1.0 - min_ratio) * (1.0 - progress));
}

void clip_grads(const std::vector<torch::Tensor>& params, double norm, double max_norm) {
  const double coef = max_norm / (norm + 1e-6);
  if (max_norm <= 0 || coef >= 1.0) return;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  at::_foreach_mul_(grads, coef);  // one launch per device where a loop took one per tensor
}

}  // namespace meshtrain
