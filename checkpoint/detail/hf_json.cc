// JsonFile (see hf_json.h): reading a checkpoint folder's JSON files and typed member access with
// messages that name the file, the key, what was found and what was expected.
#include "checkpoint/detail/hf_json.h"

#include <filesystem>
#include <fstream>
#include <iterator>

namespace kvzip::model::detail {
namespace {

std::string shown(const nlohmann::json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

}  // namespace

JsonFile JsonFile::read(const std::string& path, std::string_view what) {
  std::optional<JsonFile> f = read_optional(path);
  if (!f)
    throw Error(Errc::not_found, "Hugging Face checkpoint: '" + path +
                                     "' does not exist; it is needed for " + std::string(what));
  return std::move(*f);
}

JsonFile JsonFile::nested(std::string_view key) const {
  const nlohmann::json* m = member(key);
  if (!m || !m->is_object()) fail(Errc::corrupt, "missing object '" + std::string(key) + "'");
  JsonFile f;
  f.path_ = path_ + ": " + std::string(key);
  f.root_ = *m;
  return f;
}

std::optional<JsonFile> JsonFile::read_optional(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  JsonFile f;
  f.path_ = path;
  std::ifstream in(path, std::ios::binary);
  if (!in) f.fail(Errc::io, "cannot open for reading");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) f.fail(Errc::io, "read failed");
  try {
    f.root_ = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    f.fail(Errc::corrupt, std::string("malformed JSON: ") + e.what());
  }
  if (!f.root_.is_object())
    f.fail(Errc::corrupt, "top level is " + shown(f.root_) + ", expected an object");
  return f;
}

void JsonFile::fail(Errc code, const std::string& what) const {
  throw Error(code, "'" + path_ + "': " + what);
}

const nlohmann::json* JsonFile::member(std::string_view key, const nlohmann::json* obj) const {
  const nlohmann::json& o = obj ? *obj : root_;
  if (!o.is_object()) return nullptr;
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<uint64_t> JsonFile::opt_uint(std::string_view key, const nlohmann::json* obj,
                                           std::string_view name) const {
  const nlohmann::json* v = member(key, obj);
  if (!v) return std::nullopt;
  if (v->is_number_unsigned()) return v->get<uint64_t>();
  // Some writers store whole numbers as floats ("max_position_embeddings": 8192.0).
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (d >= 0 && d < 1.8e19 && d == double(uint64_t(d))) return uint64_t(d);
  }
  fail(Errc::corrupt, "key '" + std::string(name.empty() ? key : name) + "' is " + shown(*v) +
                          ", expected a non-negative integer");
}

namespace {

// The typed read the optional getters share: nullopt when absent, the value when `is` accepts it,
// else Errc::corrupt naming the key (or `name`), what it holds and what was expected.
template <class T>
std::optional<T> typed(const JsonFile& f, const nlohmann::json* v, std::string_view key,
                       std::string_view name, bool (nlohmann::json::*is)() const noexcept,
                       const char* expected) {
  if (!v) return std::nullopt;
  if (!(v->*is)())
    f.fail(Errc::corrupt, "key '" + std::string(name.empty() ? key : name) + "' is " + shown(*v) +
                              ", expected " + expected);
  return v->get<T>();
}

}  // namespace

std::optional<double> JsonFile::opt_number(std::string_view key, const nlohmann::json* obj,
                                           std::string_view name) const {
  return typed<double>(*this, member(key, obj), key, name, &nlohmann::json::is_number, "a number");
}

std::optional<std::string> JsonFile::opt_string(std::string_view key, const nlohmann::json* obj,
                                                std::string_view name) const {
  return typed<std::string>(*this, member(key, obj), key, name, &nlohmann::json::is_string,
                            "a string");
}

std::optional<bool> JsonFile::opt_bool(std::string_view key, const nlohmann::json* obj,
                                       std::string_view name) const {
  return typed<bool>(*this, member(key, obj), key, name, &nlohmann::json::is_boolean,
                     "true or false");
}

uint64_t JsonFile::get_uint(std::string_view key, const nlohmann::json* obj,
                            std::string_view name) const {
  std::optional<uint64_t> v = opt_uint(key, obj, name);
  if (!v) fail(Errc::corrupt, "missing key '" + std::string(name.empty() ? key : name) + "'");
  return *v;
}

}  // namespace kvzip::model::detail
