// Hugging Face fixture helpers (see hf_fixture.h).
#include "tests/support/hf_fixture.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "checkpoint/safetensors.h"
#include "common/error.h"
#include "tests/support/source_path.h"

namespace kvzip::test {
namespace fs = std::filesystem;

std::string hf_golden(const std::string& name) {
  return kvzip::test::source_path("tests/golden/hf/" + name);
}

HfCopy::HfCopy(const std::string& name) {
  static std::atomic<int> counter{0};
  dir_ = (fs::temp_directory_path() /
          ("kvzip-hf-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" + name))
             .string();
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  fs::copy(hf_golden(name), dir_, fs::copy_options::recursive);
  for (const fs::directory_entry& e : fs::directory_iterator(dir_))  // fixtures may be read-only
    fs::permissions(e.path(), fs::perms::owner_read | fs::perms::owner_write,
                    fs::perm_options::add);
}

HfCopy::~HfCopy() {
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

void HfCopy::edit_json(const std::string& file,
                       const std::function<void(nlohmann::json&)>& edit) const {
  const std::vector<uint8_t> bytes = read_file_bytes(path(file));
  nlohmann::json j = nlohmann::json::parse(bytes.begin(), bytes.end());
  edit(j);
  const std::string text = j.dump(2);
  write_file_bytes(path(file), std::vector<uint8_t>(text.begin(), text.end()));
}

void HfCopy::remove(const std::string& file) const { fs::remove(path(file)); }

std::vector<uint8_t> build_safetensors(const std::vector<StTensor>& tensors) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const StTensor& t : tensors) {
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';
  std::vector<uint8_t> out(8);
  for (int i = 0; i < 8; ++i) out[i] = uint8_t(uint64_t(h.size()) >> (8 * i));
  out.insert(out.end(), h.begin(), h.end());
  for (const StTensor& t : tensors) out.insert(out.end(), t.data.begin(), t.data.end());
  return out;
}

std::vector<StTensor> read_safetensors(const std::string& path) {
  model::safetensors::File f = model::safetensors::File::open(path);
  std::vector<StTensor> out;
  for (const model::safetensors::TensorInfo& t : f.tensors())
    out.push_back({t.name, model::safetensors::dtype_name(t.dtype), t.shape,
                   std::vector<uint8_t>(t.data, t.data + t.nbytes)});
  return out;
}

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(Errc::io, "cannot read test file " + path);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
}

void write_file_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!f) throw Error(Errc::io, "cannot write test file " + path);
}

}  // namespace kvzip::test
