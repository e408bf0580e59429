#include "distributed/loss.h"

#include "contract/model_names.h"
#include "distributed/mappings.h"

namespace meshtrain {

LossFunction loss_function(Transformer& model, MeshGroups& groups, bool loss_parallel,
                           const std::map<std::string, const ParamLayout*>& layout_of) {
  namespace names = contract::model_names;
  if (groups.shape.tp > 1 && loss_parallel && model->output) {
    const int64_t vocab_start = first_split_start(*layout_of.at(names::path({names::kOutput, names::kWeight})));
    return [&tp = *groups.tp, vocab_start](const torch::Tensor& logits, const torch::Tensor& targets) {
      return tp::vocab_parallel_cross_entropy(logits.flatten(0, 1).to(torch::kFloat32), targets.flatten(), tp,
                                              vocab_start);
    };
  }
  return [](const torch::Tensor& logits, const torch::Tensor& targets) {
    return torch::cross_entropy_loss(logits.flatten(0, 1).to(torch::kFloat32), targets.flatten());
  };
}

}  // namespace meshtrain
