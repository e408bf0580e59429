// The one place where LibTorch 1.13 (Debian, CPU) and 2.x (PyTorch wheel, CUDA)
// differ. Everything else in meshtrain compiles unchanged against both.
#pragma once

#include <torch/torch.h>
#include <torch/version.h>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

#ifdef MESHTEST_CUDA
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#else
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif

namespace compat {

// A communicator for one group of ranks. In 1.13 the Gloo backend *is* a
// ProcessGroup; from 2.0 on backends derive from c10d::Backend. Both expose the
// same collective methods (allreduce, allgather, reduce_scatter, broadcast, barrier).
#if TORCH_VERSION_MAJOR >= 2
using Backend = c10d::Backend;
#else
using Backend = c10d::ProcessGroup;
#endif

// Causal attention of q [B, H, T, D] over k, v [B, K, T, D], H a multiple of K: each kv
// head serves H/K consecutive query heads (torchtitan's repeat_kv). From 2.5 the flash
// kernel reads shared kv heads itself (enable_gqa), for bf16/fp16 only: in fp32 that flag
// would force the math kernel, so there, and before 2.5, the kv heads are repeated; 1.13
// has no public SDPA, so the plain formula runs.
inline torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const bool grouped = k.size(1) != q.size(1);
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  const bool half = q.scalar_type() == torch::kBFloat16 || q.scalar_type() == torch::kHalf;
  if (grouped && half)
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true,
                                            /*scale=*/c10::nullopt, /*enable_gqa=*/true);
#endif
  const auto n_rep = q.size(1) / k.size(1);
  const auto kr = grouped ? k.repeat_interleave(n_rep, /*dim=*/1) : k;
  const auto vr = grouped ? v.repeat_interleave(n_rep, /*dim=*/1) : v;
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, kr, vr, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true);
#else
  const auto T = q.size(-2);
  auto scores = torch::matmul(q, kr.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  auto mask = torch::ones({T, T}, torch::dtype(torch::kBool).device(q.device())).triu(1);
  scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  return torch::matmul(torch::softmax(scores, -1), vr);
#endif
}

// RMSNorm of x [..., D] with weight [D], normalised in float32 (or wider) whatever x's
// dtype. From 2.4 ATen has it as one op, which on CUDA (from 2.8) runs as one fused
// kernel each way where the formula below takes eight forward and more backward.
inline torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  if (x.scalar_type() == weight.scalar_type()) return at::rms_norm(x, {x.size(-1)}, weight, eps);
#endif
  auto xf = x.to(at::promote_types(x.scalar_type(), torch::kFloat32));
  auto normed = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return normed.to(x.scalar_type()) * weight;
}

// torch.optim.AdamW(fused=True)'s kernel: one launch updates every parameter on a device.
#if TORCH_VERSION_MAJOR >= 2
constexpr bool kHasFusedAdamW = true;
inline void fused_adamw(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                        at::TensorList exp_avg_sqs, at::TensorList steps, double lr, double beta1, double beta2,
                        double weight_decay, double eps) {
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr, beta1, beta2, weight_decay,
                    eps, /*amsgrad=*/false, /*maximize=*/false);
}
#else
constexpr bool kHasFusedAdamW = false;
inline void fused_adamw(at::TensorList, at::TensorList, at::TensorList, at::TensorList, at::TensorList, double, double,
                        double, double, double) {}
#endif

// float8 GEMMs: `a` [M, K] row-major times `b` [K, N] column-major, both float8 (e4m3 or
// e5m2), each with a float32 scalar dequantisation scale, into out_dtype. LibTorch 2.x's
// _scaled_mm (cuBLASLt on Hopper); 1.13 has no float8 dtypes, so only emulation runs there.
#if TORCH_VERSION_MAJOR >= 2
constexpr bool kHasFloat8 = true;
inline torch::Tensor to_float8(const torch::Tensor& t, bool e4m3) {
  return t.to(e4m3 ? at::kFloat8_e4m3fn : at::kFloat8_e5m2);
}
inline torch::Tensor scaled_mm(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& scale_a,
                               const torch::Tensor& scale_b, torch::ScalarType out_dtype, bool fast_accum) {
  return at::_scaled_mm(a, b, scale_a, scale_b, /*bias=*/c10::nullopt, /*scale_result=*/c10::nullopt, out_dtype,
                        fast_accum);
}
#else
constexpr bool kHasFloat8 = false;
inline torch::Tensor to_float8(const torch::Tensor&, bool) { throw std::logic_error("float8 needs LibTorch 2.x"); }
inline torch::Tensor scaled_mm(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                               torch::ScalarType, bool) {
  throw std::logic_error("float8 needs LibTorch 2.x");
}
#endif

// Grouped GEMMs (torch._grouped_mm, from 2.8): `a` [M, K] against `b` [E, K, N], rows
// [offsets[e-1], offsets[e]) of `a` with b[e] -> [M, N]; offsets int32 [E] on the device.
// The CUTLASS kernel runs for bf16 on sm90 and later, with 16-byte aligned rows.
#if defined(MESHTEST_CUDA) && (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 8))
inline bool grouped_mm_runs(const torch::Tensor& x, const torch::Tensor& w) {
  if (!x.is_cuda() || x.scalar_type() != torch::kBFloat16 || w.scalar_type() != torch::kBFloat16) return false;
  if (x.size(-1) % 8 != 0 || w.size(-1) % 8 != 0 || w.size(-2) % 8 != 0) return false;
  return at::cuda::getDeviceProperties(x.device().index())->major >= 9;
}
inline torch::Tensor grouped_mm(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& offsets) {
  return at::_grouped_mm(a, b, offsets);
}
#else
inline bool grouped_mm_runs(const torch::Tensor&, const torch::Tensor&) { return false; }
inline torch::Tensor grouped_mm(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&) {
  throw std::logic_error("grouped GEMMs need a CUDA build of LibTorch 2.8 or later");
}
#endif

// Peak bytes allocated on a CUDA device by the caching allocator; 0 on the CPU.
inline int64_t device_peak_bytes(const torch::Device& device) {
#ifdef MESHTEST_CUDA
  if (device.is_cuda()) return c10::cuda::CUDACachingAllocator::getDeviceStats(device.index()).allocated_bytes[0].peak;
#endif
  (void)device;
  return 0;
}

// Releases a backend's resources before exit. NCCL warns on stderr (and can leak
// its communicators) when a process group is never shut down; Gloo needs nothing.
inline void shutdown(Backend& backend) {
#ifdef MESHTEST_CUDA
  if (auto* nccl = dynamic_cast<c10d::ProcessGroupNCCL*>(&backend)) nccl->shutdown();
#endif
  (void)backend;
}

// Deterministic kernels (CUDA's scatter-adds otherwise reorder float sums run to run).
inline void use_deterministic_algorithms() {
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
#ifdef MESHTEST_CUDA
  ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
#endif
}

// Waits for queued device work, so host timers measure it.
inline void synchronize(const torch::Device& device) {
#ifdef MESHTEST_CUDA
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
#endif
  (void)device;
}

}  // namespace compat
