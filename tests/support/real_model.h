// The real model ($KVZIP_MODEL) loaded once for the whole test run, for the [realmodel] test
// cases that only read it (golden logits, greedy generation): one load instead of one per file.
#pragma once
#include "model/model.h"
#include "tests/support/skip.h"

namespace kvzip::test {

// The loaded model, or nullptr when $KVZIP_MODEL names no file.
const model::Model* shared_real_model();

}  // namespace kvzip::test

// Binds `var` to the shared model, or skips the running test case and returns from it.
#define KVZIP_REAL_MODEL_OR_SKIP(var)                                    \
  const ::kvzip::model::Model* var = ::kvzip::test::shared_real_model(); \
  if (!var) return ::kvzip::test::skip_no_model()
