// shared_real_model (see real_model.h).
#include "tests/support/real_model.h"

#include <memory>
#include <string>

namespace kvzip::test {

const model::Model* shared_real_model() {
  static std::unique_ptr<model::Model> model;
  const std::string path = real_model_path();
  if (path.empty()) return nullptr;
  if (!model) model = model::Model::load(path);
  return model.get();
}

}  // namespace kvzip::test
