// Where the shipped corpora are: the only translation unit that knows the source tree's path.
#include "data.h"

namespace meshtrain {

std::string shipped_corpus_path() { return MESHTRAIN_SHIPPED_CORPUS; }
std::string shipped_validation_corpus_path() { return MESHTRAIN_SHIPPED_VALIDATION_CORPUS; }

}  // namespace meshtrain
