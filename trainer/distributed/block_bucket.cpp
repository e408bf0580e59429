#include "distributed/block_bucket.h"

#include <torch/csrc/autograd/engine.h>

#include <stdexcept>

#include "base/faults.h"

namespace meshtrain {

namespace {

// A gradient reduce-scattered over dp_shard becomes this rank's piece of the mean
// gradient: summed over dp_replicate (unless that is done), divided by the data-parallel
// degree. In place.
torch::Tensor finish_gradient(torch::Tensor grad, const DataParallelWiring& wiring, bool replicas_summed) {
  if (!replicas_summed && !injected(Fault::kHsdpReplicasUnsynced)) wiring.replicate_group->all_reduce_sum(grad);
  if (!injected(Fault::kGradSumNotMean) && wiring.grad_divisor != 1.0) grad.div_(wiring.grad_divisor);
  return grad;
}

// The autograd node of one forward's gather: its outputs are the block's full weights;
// its backward hands their gradients to the bucket, which reduce-scatters them and adds
// the result to the pieces' .grad itself at the end of backward (so the reduce-scatter
// can overlap the next block's backward), and returns no gradient through autograd.
struct GatherBucket : torch::autograd::Function<GatherBucket> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, at::TensorList pieces,
                                                BlockBucket* bucket) {
    // The bucket lives as long as the ParallelModel; contexts hold plain values only.
    ctx->saved_data["bucket"] = reinterpret_cast<int64_t>(bucket);
    ctx->saved_data["n"] = static_cast<int64_t>(pieces.size());
    return bucket->gather_new();
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* bucket = reinterpret_cast<BlockBucket*>(ctx->saved_data["bucket"].toInt());
    bucket->reduce(grads);
    return torch::autograd::variable_list(ctx->saved_data["n"].toInt() + 1);
  }
};

// Storage bytes of a tensor that owns its storage from offset 0.
size_t storage_bytes(const torch::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

}  // namespace

void release_storage(const torch::Tensor& t) {
  auto* storage = t.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, storage->device()));
  storage->set_nbytes(0);
}

void reallocate_storage(const torch::Tensor& t) {
  auto* storage = t.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(storage->allocator()->allocate(storage_bytes(t)));
  storage->set_nbytes(storage_bytes(t));
}

void BlockBucket::add(const ParamLayout* layout, torch::Tensor piece) {
  layouts_.push_back(layout);
  pieces_.push_back(std::move(piece));
}

int64_t BlockBucket::row_numel(size_t i) const {
  int64_t n = 1;
  for (size_t d = 1; d < layouts_[i]->tp_local_shape.size(); ++d) n *= layouts_[i]->tp_local_shape[d];
  return n;
}

int64_t BlockBucket::offset(size_t i, size_t r) const {
  int64_t n = 0;
  for (size_t j = 0; j < i; ++j) n += layouts_[j]->shard_rows[r] * row_numel(j);
  return n;
}

int64_t BlockBucket::rank_numel(size_t r) const { return offset(layouts_.size(), r); }

int64_t BlockBucket::width() const {
  int64_t n = 0;
  for (size_t r = 0; r < layouts_.front()->shard_rows.size(); ++r) n = std::max(n, rank_numel(r));
  return n;
}

bool BlockBucket::even() const {
  for (const auto* l : layouts_)
    for (int64_t rows : l->shard_rows)
      if (rows != l->shard_rows.front()) return false;
  return true;
}

// ---- gathering ----------------------------------------------------------------

void BlockBucket::start_gather() {
  if (pending_gather_) return;
  std::vector<torch::Tensor> flat;
  gather_versions_.clear();
  for (const auto& p : pieces_) {
    flat.push_back(p.detach().flatten());
    gather_versions_.push_back(p._version());
  }
  auto mine = torch::cat(flat).to(options_.device, options_.wiring.param_dtype);
  if (mine.numel() < width()) mine = torch::cat({mine, mine.new_zeros({width() - mine.numel()})});
  pending_gather_ = options_.wiring.shard_group->start_all_gather(mine);
}

torch::Tensor BlockBucket::take_gather() {
  // A prefetch is stale if a piece changed since (an optimizer step after an aborted pass).
  bool stale = false;
  for (size_t i = 0; pending_gather_ && i < pieces_.size(); ++i) stale |= pieces_[i]._version() != gather_versions_[i];
  if (stale) {
    pending_gather_();
    pending_gather_ = nullptr;
  }
  start_gather();
  auto gathered = pending_gather_();
  pending_gather_ = nullptr;
  return gathered;
}

// Rank-major (rank r's rows of every weight, then padding) to one tensor per weight.
void BlockBucket::unpack(const torch::Tensor& gathered, const std::vector<torch::Tensor>& into) const {
  const size_t ranks = layouts_.front()->shard_rows.size();
  const int64_t w = width();
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < into.size(); ++i) {
    auto dst = into[i].view({-1});
    if (even()) {  // one strided copy per weight
      const int64_t n = layouts_[i]->shard_rows.front() * row_numel(i);
      dst.view({static_cast<int64_t>(ranks), n})
          .copy_(gathered.view({static_cast<int64_t>(ranks), w}).narrow(1, offset(i, 0), n));
      continue;
    }
    int64_t at = 0;
    for (size_t r = 0; r < ranks; ++r) {
      const int64_t n = layouts_[i]->shard_rows[r] * row_numel(i);
      const size_t offsets_of = injected(Fault::kUnevenBucketOffsets) ? 0 : r;
      dst.narrow(0, at, n).copy_(gathered.narrow(0, static_cast<int64_t>(r) * w + offset(i, offsets_of), n));
      at += n;
    }
  }
}

std::vector<torch::Tensor> BlockBucket::gather_new() {
  const auto gathered = take_gather();
  std::vector<torch::Tensor> full;
  for (const auto* l : layouts_) full.push_back(torch::empty(l->tp_local_shape, gathered.options()));
  unpack(gathered, full);
  return full;
}

// ---- the block's forward ----------------------------------------------------------

void BlockBucket::enter() {
  full_.clear();  // a pass that threw may have left weights behind
  const bool in_recompute = options_.recomputed && torch::GradMode::is_enabled();
  // The next block's gather runs while this one computes; not in the backward recompute,
  // where the next block is already done.
  if (next_ != nullptr && !in_recompute) next_->start_gather();
  full_ = GatherBucket::apply(at::TensorList(pieces_), this);
  weights_ = Weights::kHeld;
}

const torch::Tensor& BlockBucket::weight(size_t i) const {
  if (weights_ != Weights::kHeld)
    throw std::logic_error("a transformer block's weight was used outside the block's forward");
  return full_[i];
}

torch::Tensor BlockBucket::exit(const torch::Tensor& output) {
  if (!output.requires_grad()) {  // no graph keeps the weights: inference, or the checkpointed forward
    full_.clear();
    weights_ = Weights::kNone;
    return output;
  }
  AwaitingBackward pass{full_, false};
  if (options_.reshard_after_forward && !options_.recomputed) {
    // The memory goes; the storage objects, which autograd's saved tensors share, stay
    // for before_backward to refill.
    for (const auto& t : full_) release_storage(t);
    pass.released = true;
    weights_ = Weights::kFreed;
  }
  awaiting_.push_back(std::move(pass));
  // Runs when the gradient of the block's output is ready: before any of its backward.
  auto hook = [this](const torch::Tensor&) { before_backward(); };
  output.register_hook(hook);
  return output;
}

// ---- the block's backward ---------------------------------------------------------

bool BlockBucket::will_gather_for_backward() const {
  // A recomputed bucket gathers in its recompute, unless the recompute already ran: with one
  // bucket per weight, the block's other weights were gathered when its recompute began.
  return (!awaiting_.empty() && awaiting_.front().released) || (options_.recomputed && weights_ != Weights::kHeld);
}

void BlockBucket::before_backward() {
  if (!awaiting_.empty() && awaiting_.front().released) {
    auto& pass = awaiting_.front();
    const auto gathered = take_gather();
    for (const auto& t : pass.weights) reallocate_storage(t);
    // Written through aliases that share the memory but not the version counter:
    // autograd's saved references must not see a modification.
    std::vector<torch::Tensor> aliases;
    for (const auto& t : pass.weights)
      aliases.push_back(torch::from_blob(t.storage().data_ptr().get(), t.sizes(), t.options()));
    unpack(gathered, aliases);
    pass.released = false;
  }
  if (previous_ != nullptr && previous_->will_gather_for_backward()) previous_->start_gather();
}

void BlockBucket::reduce(const std::vector<torch::Tensor>& grads) {
  const ParamLayout& first = *layouts_.front();
  const size_t ranks = first.shard_rows.size();
  const int64_t w = width();
  // Rank-major, as the gather laid them out: rank r's rows of every weight, then
  // padding; each gradient copied (and cast to reduce_dtype) straight into its place.
  bool complete = true;  // every element is written below: no need to zero
  for (const auto& g : grads) complete &= g.defined();
  for (size_t r = 0; r < ranks; ++r) complete &= rank_numel(r) == w;
  const auto options = pieces_.front().options().device(options_.device).dtype(options_.wiring.reduce_dtype);
  auto flat = complete ? torch::empty({static_cast<int64_t>(ranks) * w}, options)
                       : torch::zeros({static_cast<int64_t>(ranks) * w}, options);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) continue;  // a weight the block did not use: zero gradient
    const auto grad = grads[i].reshape({-1});
    if (even()) {
      const int64_t n = layouts_[i]->shard_rows.front() * row_numel(i);
      flat.view({static_cast<int64_t>(ranks), w})
          .narrow(1, offset(i, 0), n)
          .copy_(grad.view({static_cast<int64_t>(ranks), n}));
      continue;
    }
    int64_t at = 0;
    for (size_t r = 0; r < ranks; ++r) {
      const int64_t n = layouts_[i]->shard_rows[r] * row_numel(i);
      flat.narrow(0, static_cast<int64_t>(r) * w + offset(i, r), n).copy_(grad.narrow(0, at, n));
      at += n;
    }
  }
  // At most one reduce-scatter in flight per direction: the block after this one (whose
  // backward ran first) lands its gradient now, before this block's starts.
  if (next_ != nullptr) next_->finish_reduce();
  // Under DDP (one shard) the all-reduce itself is what overlaps; under FSDP and HSDP the
  // reduce-scatter (HSDP's all-reduce of the shard follows when it lands).
  reduced_over_replicas_ = options_.wiring.shard_group->size() == 1 && !injected(Fault::kHsdpReplicasUnsynced);
  pending_reduce_ = reduced_over_replicas_ ? options_.wiring.replicate_group->start_all_reduce_sum(flat)
                                           : options_.wiring.shard_group->start_reduce_scatter_sum(flat);
  torch::autograd::Engine::get_default_engine().queue_callback([this] { finish_reduce(); });
  // This backward's weights are done with: release them (autograd frees its references
  // as it goes).
  if (!awaiting_.empty()) {
    for (const auto& t : awaiting_.front().weights) release_storage(t);
    awaiting_.pop_front();
  }
  if (awaiting_.empty()) {
    full_.clear();
    weights_ = Weights::kNone;
  }
}

void BlockBucket::finish_reduce() {
  if (!pending_reduce_) return;
  auto mine = pending_reduce_();
  pending_reduce_ = nullptr;
  mine = finish_gradient(mine, options_.wiring, reduced_over_replicas_);
  const auto rank = static_cast<size_t>(options_.wiring.shard_group->rank());
  int64_t at = 0;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < pieces_.size(); ++i) {
    const int64_t n = layouts_[i]->shard_rows[rank] * row_numel(i);
    auto grad = mine.narrow(0, at, n).view(pieces_[i].sizes()).to(pieces_[i].options());
    at += n;
    auto& slot = pieces_[i].mutable_grad();
    if (slot.defined())
      slot.add_(grad);
    else
      slot = grad;
  }
  if (on_gradients_ready) on_gradients_ready(pieces_);
}

}  // namespace meshtrain
