// Test helpers for Hugging Face checkpoint folders: the committed fixtures under tests/golden/hf
// (written by scripts/golden/make_hf_fixtures.py), copies of them in a temp folder that tests
// then damage (JSON edits, rewritten or truncated safetensors), and a safetensors writer that
// lays tensors out back to back after the JSON header as the format describes.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvzip::test {

// tests/golden/hf/<name> (a folder) or tests/golden/hf/<file>.
std::string hf_golden(const std::string& name);

// A fresh temp folder holding a copy of fixture `name`; removed by the destructor.
class HfCopy {
 public:
  explicit HfCopy(const std::string& name);
  ~HfCopy();
  HfCopy(const HfCopy&) = delete;
  HfCopy& operator=(const HfCopy&) = delete;
  const std::string& dir() const { return dir_; }
  std::string path(const std::string& file) const { return dir_ + "/" + file; }
  // Reads file as JSON, lets `edit` change it, writes it back.
  void edit_json(const std::string& file, const std::function<void(nlohmann::json&)>& edit) const;
  void remove(const std::string& file) const;

 private:
  std::string dir_;
};

struct StTensor {
  std::string name;
  std::string dtype;  // "F32", "BF16", "I64", ... (written verbatim)
  std::vector<uint64_t> shape;
  std::vector<uint8_t> data;  // written as is; data_offsets span exactly these bytes
};

// A .safetensors image: header JSON (tensors in the given order, data back to back), padded with
// spaces to a multiple of 8 bytes as the reference writer does.
std::vector<uint8_t> build_safetensors(const std::vector<StTensor>& tensors);
// The tensors of a .safetensors file, in name order (read with kvzip's reader).
std::vector<StTensor> read_safetensors(const std::string& path);
std::vector<uint8_t> read_file_bytes(const std::string& path);
void write_file_bytes(const std::string& path, const std::vector<uint8_t>& bytes);

}  // namespace kvzip::test
