// What the extension's source files share: the loaded model a Python kvzip.Model holds, the
// progress callback type, and the binding functions each file adds to the module.
#pragma once
#include <nanobind/nanobind.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "model/model.h"

namespace kvzip::python {

struct PyModel {
  std::unique_ptr<model::Model> m;
};

// (done, total): tokens prefilled, or calibration tokens trained on.
using Progress = std::function<void(uint64_t, uint64_t)>;

// scorer.cc: calibrate (the learned scorer) and calibration_texts.
void bind_scorer(nanobind::module_& m);

}  // namespace kvzip::python
