// Matrix helpers (see weights.h): owned fp32 matrices for tests and tools, and canonical-order
// dequantization of row ranges through the kernels' view.
#include "checkpoint/weights.h"

#include <cstring>

#include "common/error.h"

namespace kvzip::model {

Matrix Matrix::from_f32(const std::vector<float>& values, uint32_t rows, uint32_t cols,
                        std::string name) {
  if (values.size() != size_t(rows) * cols)
    throw Error(Errc::invalid_argument, "Matrix::from_f32 " + name + ": " +
                                            std::to_string(values.size()) + " values for a " +
                                            std::to_string(rows) + "x" + std::to_string(cols) +
                                            " matrix");
  auto bytes = std::make_shared<std::vector<uint8_t>>(values.size() * sizeof(float));
  if (!values.empty()) std::memcpy(bytes->data(), values.data(), bytes->size());
  Matrix m;
  m.type = kernels::quant::GgmlType::F32;
  m.rows = rows;
  m.cols = cols;
  m.data = bytes->data();
  m.owned = std::move(bytes);
  m.name = std::move(name);
  return m;
}

void dequantize_rows(const Matrix& m, uint32_t row0, uint32_t n, float* out) {
  if (uint64_t(row0) + n > m.rows)
    throw Error(Errc::invalid_argument,
                "dequantize_rows " + m.name + ": rows [" + std::to_string(row0) + ", " +
                    std::to_string(uint64_t(row0) + n) + ") of " + std::to_string(m.rows));
  kernels::dequantize_view_rows(nullptr, m.view(), row0, n, out);
}

std::vector<float> to_f32(const Matrix& m) {
  std::vector<float> out(size_t(m.rows) * m.cols);
  dequantize_rows(m, 0, m.rows, out.data());
  return out;
}

uint64_t Weights::matrix_bytes() const {
  uint64_t n = tok_embd.bytes() + output.bytes();
  for (const LayerWeights& l : layers)
    for (const Matrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      n += m->bytes();
  return n;
}

}  // namespace kvzip::model
