// The compiled half of the Python package (kvzip._kvzip, nanobind): the same libraries the CLI
// drives — format/ to read and write .kvz files, loader/ and compress/ for answers and
// compression (the learned scorer's training is in scorer.cc). Arrays cross as numpy: reader rows
// are zero-copy views of the mapped file where the file stores them raw (the view keeps the reader
// alive), everything else is a fresh array. kvzip::Error becomes the Python exception class of its
// code (kvzip/errors.py). Long calls (model load, compress, answers) release the GIL; progress
// callbacks take it back.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/model_path.h"
#include "common/error.h"
#include "compress/learned_scorer.h"
#include "compress/pipeline.h"
#include "compress/quantize.h"
#include "format/format.h"
#include "library/library.h"
#include "loader/loader.h"
#include "model/model.h"
#include "python/src/engine.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace kvzip::python {
namespace {

template <class T>
using Array = nb::ndarray<nb::numpy, T>;
template <class T>
using Input = nb::ndarray<const T, nb::c_contig, nb::device::cpu>;

// A numpy array that owns `v` (moved to the heap, freed with the array).
template <class T>
Array<T> owned(std::vector<T>&& v, std::vector<size_t> shape) {
  auto* p = new std::vector<T>(std::move(v));
  nb::capsule owner(p, [](void* x) noexcept { delete static_cast<std::vector<T>*>(x); });
  return Array<T>(p->data(), shape.size(), shape.data(), owner);
}

// A read-only numpy view of `data` kept valid by `owner`.
template <class T>
nb::ndarray<nb::numpy, const T> view(const T* data, std::vector<size_t> shape, nb::handle owner) {
  return nb::ndarray<nb::numpy, const T>(data, shape.size(), shape.data(), owner);
}

template <class T>
std::vector<T> to_vector(const Input<T>& a) {
  return std::vector<T>(a.data(), a.data() + a.size());
}

// ---- Header <-> dict ----------------------------------------------------------------------

nb::dict model_dict(const format::CacheHeader& h) {
  nb::dict m;
  m["arch"] = h.model.arch;
  m["name"] = h.model.name;
  m["tokenizer_hash"] = h.model.tokenizer_hash;
  m["weights_hash"] = h.model.weights_hash;
  m["n_layers"] = h.n_layers;
  m["n_kv_heads"] = h.n_kv_heads;
  m["head_dim"] = h.head_dim;
  m["rope_base"] = h.rope_base;
  nb::dict rs;
  const char* kinds[] = {"none", "linear", "llama3"};
  rs["kind"] = kinds[static_cast<uint32_t>(h.rope_scaling.kind) % 3];
  rs["factor"] = h.rope_scaling.factor;
  rs["low_freq_factor"] = h.rope_scaling.low_freq_factor;
  rs["high_freq_factor"] = h.rope_scaling.high_freq_factor;
  rs["original_context"] = h.rope_scaling.original_context;
  rs["freq_factors"] = h.rope_scaling.freq_factors;
  m["rope_scaling"] = rs;
  return m;
}

nb::dict header_dict(const format::CacheHeader& h) {
  nb::dict d;
  d["tool_version"] = h.tool_version;
  d["created_unix"] = h.created_unix;
  d["model"] = model_dict(h);
  d["kv_dtype"] = std::string(format::dtype_name(h.kv_dtype));
  d["kv_group_size"] = h.kv_group_size;
  d["kv_f16_below"] = h.kv_f16_below;
  d["prefix_tokens"] = h.prefix_tokens;
  d["suffix_tokens"] = h.suffix_tokens;
  d["document_tokens"] = h.document_tokens;
  d["document_text"] = nb::bytes(h.document_text.data(), h.document_text.size());
  d["method"] = h.method;
  d["params"] = h.params;
  d["requested_ratio"] = h.requested_ratio;
  d["achieved_ratio"] = h.achieved_ratio;
  d["query_template"] = loader::query_template(h);
  return d;
}

template <class T>
T get(const nb::dict& d, const char* key, T fallback) {
  return d.contains(key) ? nb::cast<T>(d[key]) : fallback;
}

void set_model(format::CacheHeader& h, const nb::dict& m) {
  h.model.arch = nb::cast<std::string>(m["arch"]);
  h.model.name = get<std::string>(m, "name", "");
  h.model.tokenizer_hash = get<uint64_t>(m, "tokenizer_hash", 0);
  h.model.weights_hash = get<uint64_t>(m, "weights_hash", 0);
  h.n_layers = nb::cast<uint32_t>(m["n_layers"]);
  h.n_kv_heads = nb::cast<uint32_t>(m["n_kv_heads"]);
  h.head_dim = nb::cast<uint32_t>(m["head_dim"]);
  h.rope_base = get<float>(m, "rope_base", 10000.0f);
  if (m.contains("rope_scaling") && !m["rope_scaling"].is_none()) {
    const nb::dict rs = nb::cast<nb::dict>(m["rope_scaling"]);
    const std::string kind = get<std::string>(rs, "kind", "none");
    if (kind == "none") h.rope_scaling.kind = RopeScalingKind::None;
    else if (kind == "linear") h.rope_scaling.kind = RopeScalingKind::Linear;
    else if (kind == "llama3") h.rope_scaling.kind = RopeScalingKind::Llama3;
    else
      throw Error(Errc::invalid_argument,
                  "rope_scaling kind " + kind + " is not one of none, linear, llama3");
    h.rope_scaling.factor = get<float>(rs, "factor", 1.0f);
    h.rope_scaling.low_freq_factor = get<float>(rs, "low_freq_factor", 1.0f);
    h.rope_scaling.high_freq_factor = get<float>(rs, "high_freq_factor", 4.0f);
    h.rope_scaling.original_context = get<uint32_t>(rs, "original_context", 0);
    h.rope_scaling.freq_factors = get<std::vector<float>>(rs, "freq_factors", {});
  }
}

format::DType dtype_of(const std::string& name) {
  const auto t = format::parse_dtype(name);
  if (!t)
    throw Error(Errc::invalid_argument,
                "kv_dtype " + name + " is not one of f32, f16, bf16, q8, q4");
  return *t;
}

// ---- Reading ------------------------------------------------------------------------------

struct Reader {
  format::CacheReader r;
  std::string path;
};

std::unique_ptr<Reader> open_reader(const std::string& path, const std::string& verify) {
  format::OpenOptions o;
  if (verify == "metadata") o.verify = format::Verify::Metadata;
  else if (verify == "on_access") o.verify = format::Verify::OnAccess;
  else if (verify == "full") o.verify = format::Verify::Full;
  else
    throw Error(Errc::invalid_argument,
                "verify " + verify + " is not one of metadata, on_access, full");
  return std::make_unique<Reader>(Reader{format::CacheReader::open(path, o), path});
}

void check_layer(const Reader& r, uint32_t layer) {
  if (layer >= r.r.header().n_layers)
    throw Error(Errc::invalid_argument, "layer " + std::to_string(layer) + " is outside 0.." +
                                            std::to_string(r.r.header().n_layers - 1));
}

nb::dict quant_dict(format::QuantRows&& q, uint32_t hkv, uint32_t d, uint64_t rows,
                    uint64_t f16_rows) {
  nb::dict out;
  const uint64_t qrows = rows - f16_rows;
  out["channel_scale"] = owned(std::move(q.channel_scale), {hkv, d});
  out["dense"] = owned(std::move(q.dense), {size_t(f16_rows), d});
  const size_t per_row_params = qrows ? q.params.size() / qrows : 0;
  const size_t per_row_codes = qrows ? q.codes.size() / qrows : 0;
  out["params"] = owned(std::move(q.params), {size_t(qrows), per_row_params});
  out["codes"] = owned(std::move(q.codes), {size_t(qrows), per_row_codes});
  return out;
}

// ---- Writing ------------------------------------------------------------------------------

// layers: per layer (head_rows, positions, k, v, scores or None), rows head-major.
void write_file(const std::string& path, const nb::dict& header, const nb::list& layers,
                const std::string& kv_dtype, uint32_t kv_group, int zstd, bool force) {
  format::CacheContents c;
  format::CacheHeader& h = c.header;
  h.tool_version = std::string("kvzip ") + KVZIP_VERSION + " (python)";
  h.created_unix = static_cast<int64_t>(std::time(nullptr));
  set_model(h, nb::cast<nb::dict>(header["model"]));
  h.prefix_tokens = nb::cast<std::vector<uint32_t>>(header["prefix_tokens"]);
  h.suffix_tokens = nb::cast<std::vector<uint32_t>>(header["suffix_tokens"]);
  h.document_tokens = nb::cast<std::vector<uint32_t>>(header["document_tokens"]);
  if (header.contains("document_text")) {
    const nb::bytes b = nb::cast<nb::bytes>(header["document_text"]);
    h.document_text.assign(b.c_str(), b.size());
  }
  h.method = get<std::string>(header, "method", "external");
  h.params = get<std::vector<std::pair<std::string, std::string>>>(header, "params", {});
  h.requested_ratio = get<double>(header, "requested_ratio", 1.0);
  h.achieved_ratio = get<double>(header, "achieved_ratio", 1.0);
  if (zstd < 0 || zstd > 19)
    throw Error(Errc::invalid_argument,
                "zstd level " + std::to_string(zstd) + " is outside 0 (off) .. 19");
  bool all_scores = true, any_scores = false;
  for (nb::handle item : layers) {
    auto t = nb::cast<nb::tuple>(item);
    format::LayerKv l;
    l.head_rows = to_vector(nb::cast<Input<uint32_t>>(t[0]));
    l.positions = to_vector(nb::cast<Input<uint32_t>>(t[1]));
    l.k = to_vector(nb::cast<Input<float>>(t[2]));
    l.v = to_vector(nb::cast<Input<float>>(t[3]));
    if (!t[4].is_none()) {
      l.scores = to_vector(nb::cast<Input<float>>(t[4]));
      any_scores = true;
    } else {
      all_scores = false;
    }
    c.layers.push_back(std::move(l));
  }
  if (any_scores && !all_scores)
    throw Error(Errc::invalid_argument, "scores: give them for every layer or for none");
  c.has_scores = any_scores;
  compress::KvStorage kv;
  kv.dtype = dtype_of(kv_dtype);
  kv.group = kv_group;
  format::validate(c);  // shapes first: quantizing assumes them
  compress::set_kv_dtype(c, kv);
  format::WriteOptions w;
  w.zstd_level = zstd;
  w.force = force;
  nb::gil_scoped_release release;
  format::write_cache_file(c, path, w);
}

// ---- The engine ---------------------------------------------------------------------------

std::unique_ptr<PyModel> load_model(const std::string& path) {
  nb::gil_scoped_release release;
  return std::make_unique<PyModel>(PyModel{model::Model::load(model::resolve_model_path(path))});
}

nb::dict fingerprint_dict(const ModelFingerprint& fp, const ModelConfig& c) {
  format::CacheHeader h;
  format::set_model(h, c, fp);
  return model_dict(h);
}

// Compresses `text` into the file `out`; returns timings.
nb::dict compress_text(const PyModel& pm, const std::string& text, const std::string& out,
                       double ratio, const std::string& method, const std::string& level,
                       const std::string& kv_dtype, uint32_t kv_group, int zstd, bool force,
                       const std::string& system, const std::string& query_template,
                       uint32_t threads, uint32_t chunk, const std::string& scorer, bool stream,
                       const std::optional<Progress>& progress) {
  const model::Model& m = *pm.m;
  compress::CompressFileOptions fo;
  fo.compress.method = compress::method_with_scorer(method, !scorer.empty());
  fo.compress.ratio = ratio;
  fo.compress.level = compress::parse_selection_level(level);
  fo.compress.stream = stream;
  fo.compress.scorer = compress::make_scorer_options(m.chat(), chunk, 0, {});
  if (!scorer.empty())
    compress::use_learned_scorer(fo.compress.scorer, compress::load_learned_scorer(scorer), m);
  fo.system = system;
  fo.query_template = query_template;
  fo.kv.dtype = dtype_of(kv_dtype);
  fo.kv.group = kv_group;
  fo.write.zstd_level = zstd;
  fo.write.force = force;
  fo.threads = threads;
  if (progress) {
    Progress fn = *progress;
    fo.compress.prefill.progress = [fn](const prefill::PrefillProgress& p) {
      nb::gil_scoped_acquire acquire;
      fn(p.done, p.total);
    };
  }
  const compress::CompressResult r = [&] {
    nb::gil_scoped_release release;
    return compress::compress_to_file(m, text, fo, out);
  }();
  nb::dict d;
  d["prefill_s"] = r.prefill_s;
  d["scoring_s"] = r.scoring_s;
  d["select_s"] = r.select_s;
  d["achieved_ratio"] = r.achieved_ratio;
  d["peak_rows"] = r.peak_rows;
  return d;
}

struct Session {
  std::unique_ptr<loader::QuerySession> s;
  const model::Model* m = nullptr;
  nb::object model_ref;  // keeps the model alive as long as the session
};

// An answer's common fields as a dict (the callers add what is theirs).
nb::dict answer_dict(const loader::Answer& a) {
  nb::dict d;
  d["question"] = a.question;
  d["text"] = a.text;
  d["tokens"] = a.tokens;
  d["stopped"] = a.stopped;
  d["ms"] = a.ms;
  d["first_token_ms"] = a.first_token_ms;
  return d;
}

std::unique_ptr<Session> open_session(nb::object model_obj, const std::string& path, bool force,
                                      const std::string& matmul, uint32_t threads, bool kv_f32) {
  const PyModel& pm = nb::cast<const PyModel&>(model_obj);
  loader::SessionOptions so;
  so.force = force;
  so.threads = threads;
  if (matmul != "fast" && matmul != "exact")
    throw Error(Errc::invalid_argument, "matmul " + matmul + " is not one of fast, exact");
  so.matmul = matmul == "exact" ? kernels::MatmulPath::Exact : kernels::MatmulPath::Fast;
  if (kv_f32) so.kv_form = loader::KvForm::F32;
  auto out = std::make_unique<Session>();
  out->m = pm.m.get();
  out->model_ref = model_obj;
  nb::gil_scoped_release release;
  out->s = std::make_unique<loader::QuerySession>(*pm.m, path, so);
  return out;
}

nb::dict ask(Session& s, const std::string& question, uint32_t max_tokens, float temperature,
             uint64_t seed, const std::optional<std::function<void(const std::string&)>>& on_text) {
  model::GenerateParams gp;
  gp.max_tokens = max_tokens;
  gp.sampling.temperature = temperature;
  gp.sampling.seed = seed;
  gp.stop_tokens = s.m->chat().stop_tokens();
  std::function<void(const std::string&)> cb;
  if (on_text) {
    auto fn = *on_text;
    cb = [fn](const std::string& piece) {
      nb::gil_scoped_acquire acquire;
      fn(piece);
    };
  }
  loader::Answer a;
  {
    nb::gil_scoped_release release;
    a = s.s->ask(question, gp, cb);
  }
  nb::dict d = answer_dict(a);
  const size_t v = a.first_logits.size();
  d["first_logits"] = owned(std::move(a.first_logits), {v});
  return d;
}

// The library of a folder (library/library.h): its index refreshed, unless the folder cannot be
// written (then read as it stands).
std::unique_ptr<library::Index> open_library(const std::string& dir) {
  library::IndexOptions io;
  io.warn = [](const std::string& w) { std::fprintf(stderr, "kvzip: warning: %s\n", w.c_str()); };
  io.read_only = std::filesystem::is_directory(dir) && !library::index_writable(dir);
  auto index = std::make_unique<library::Index>(dir, io);
  if (!io.read_only) index->refresh();
  return index;
}

nb::list hits_list(const std::vector<library::Hit>& hits) {
  nb::list out;
  for (const auto& h : hits) {
    nb::dict d;
    d["id"] = h.id;
    d["path"] = h.path;
    d["score"] = h.score;
    d["tokens"] = h.tokens;
    out.append(d);
  }
  return out;
}

nb::list library_search(const std::string& dir, const std::string& question, uint32_t top_k,
                        nb::object model_obj) {
  const ModelFingerprint* fp =
      model_obj.is_none() ? nullptr : &nb::cast<const PyModel&>(model_obj).m->fingerprint();
  std::vector<library::Hit> hits;
  {
    nb::gil_scoped_release release;
    hits = open_library(dir)->search(question, top_k, fp);
  }
  return hits_list(hits);
}

nb::dict library_ask(nb::object model_obj, const std::string& dir, const std::string& question,
                     uint32_t top_k, uint32_t max_tokens, std::optional<double> blend,
                     uint32_t threads) {
  const PyModel& pm = nb::cast<const PyModel&>(model_obj);
  library::Selection sel;
  loader::Answer a;
  {
    nb::gil_scoped_release release;
    auto index = open_library(dir);
    sel = library::retrieve(*index, *pm.m, question, top_k, max_tokens);
    std::vector<std::string> paths;
    for (const auto& h : sel.sources) paths.push_back(h.path);
    loader::SessionOptions so;
    so.threads = threads;
    so.compose.blend = blend;
    loader::QuerySession s(*pm.m, paths, so);
    model::GenerateParams gp;
    gp.max_tokens = max_tokens;
    gp.stop_tokens = pm.m->chat().stop_tokens();
    a = s.ask(question, gp);
  }
  nb::dict d = answer_dict(a);
  d["sources"] = hits_list(sel.sources);
  return d;
}

}  // namespace
}  // namespace kvzip::python

using namespace kvzip;
using namespace kvzip::python;

namespace {

// Reader's per-layer arrays: views of the mapping where raw, owned arrays where decoded.
void bind_reader_arrays(nb::class_<Reader>& c) {
  c.def("head_rows",
        [](nb::handle self, uint32_t l) {
          const Reader& r = nb::cast<const Reader&>(self);
          check_layer(r, l);
          auto s = r.r.head_rows(l);
          return view(s.data(), {s.size()}, self);
        })
      .def("positions",
           [](nb::handle self, uint32_t l) {
             const Reader& r = nb::cast<const Reader&>(self);
             check_layer(r, l);
             auto s = r.r.positions(l);
             return view(s.data(), {s.size()}, self);
           })
      .def("scores",
           [](nb::handle self, uint32_t l) -> nb::object {
             const Reader& r = nb::cast<const Reader&>(self);
             check_layer(r, l);
             if (!r.r.has_scores()) return nb::none();
             auto s = r.r.scores(l);
             return nb::cast(view(s.data(), {s.size()}, self));
           })
      // (k, v) as zero-copy (R, D) views of the mapping for a raw f32 layer, else None.
      .def("kv_view",
           [](nb::handle self, uint32_t l) -> nb::object {
             const Reader& r = nb::cast<const Reader&>(self);
             check_layer(r, l);
             const auto kv = r.r.kv_view(l);
             if (!kv) return nb::none();
             const size_t d = r.r.header().head_dim, rows = r.r.layer_rows(l);
             return nb::make_tuple(view(kv->k.data(), {rows, d}, self),
                                   view(kv->v.data(), {rows, d}, self));
           })
      .def("read_kv",
           [](const Reader& r, uint32_t l) {
             check_layer(r, l);
             const size_t d = r.r.header().head_dim, rows = r.r.layer_rows(l);
             std::vector<float> k(rows * d), v(rows * d);
             {
               nb::gil_scoped_release release;
               r.r.read_kv(l, k, v);
             }
             return nb::make_tuple(owned(std::move(k), {rows, d}), owned(std::move(v), {rows, d}));
           })
      .def("read_quant", [](const Reader& r, uint32_t l) {
        check_layer(r, l);
        format::LayerKv kv = r.r.read_quant_layer(l);
        const auto& h = r.r.header();
        const uint64_t f16 = format::f16_row_count(h, kv.positions);
        return nb::make_tuple(
            quant_dict(std::move(kv.qk), h.n_kv_heads, h.head_dim, kv.positions.size(), f16),
            quant_dict(std::move(kv.qv), h.n_kv_heads, h.head_dim, kv.positions.size(), f16));
      });
}

// The class Reader: one .kvz file, its header and each layer's arrays (zero-copy where raw).
void bind_reader(nb::module_& m) {
  nb::class_<Reader> c(m, "Reader");
  c.def_static("open", &open_reader, "path"_a, "verify"_a = "on_access")
      .def_ro("path", &Reader::path)
      .def_prop_ro(
          "version",
          [](const Reader& r) { return std::make_pair(r.r.version_major(), r.r.version_minor()); })
      .def_prop_ro("file_size", [](const Reader& r) { return r.r.file_size(); })
      .def_prop_ro("has_scores", [](const Reader& r) { return r.r.has_scores(); })
      .def("header", [](const Reader& r) { return header_dict(r.r.header()); });
  bind_reader_arrays(c);
  c.def("verify",
        [](const Reader& r) {
          nb::gil_scoped_release release;
          r.r.verify();
        })
      .def(
          "describe",
          [](const Reader& r, bool json) {
            format::DescribeOptions o;
            o.json = json;
            o.file_name = r.path;
            return format::describe(r.r, o);
          },
          "json"_a = false)
      .def(
          "check_model",
          [](const Reader& r, const nb::dict& model, bool force) {
            format::CacheHeader h;
            set_model(h, model);
            return r.r.check_model(h.model, force);
          },
          "model"_a, "force"_a = false);
}

// The class Model and what takes one: compression, a library's search and answers.
void bind_model(nb::module_& m) {
  nb::class_<PyModel>(m, "Model")
      .def_static("load", &load_model, "path"_a = "")
      .def_prop_ro("path", [](const PyModel& p) { return p.m->path(); })
      .def("description",
           [](const PyModel& p) { return fingerprint_dict(p.m->fingerprint(), p.m->config()); })
      .def("encode", [](const PyModel& p,
                        const std::string& text) { return p.m->tokenizer().encode(text, false); })
      .def("decode", [](const PyModel& p,
                        const std::vector<int32_t>& ids) { return p.m->tokenizer().decode(ids); })
      .def("stop_tokens", [](const PyModel& p) { return p.m->chat().stop_tokens(); });

  m.def("compress", &compress_text, "model"_a, "text"_a, "out"_a,
        "ratio"_a = compress::kDefaultRatio, "method"_a = "", "level"_a = "global",
        "kv_dtype"_a = "f32", "kv_group"_a = 0, "zstd"_a = 0, "force"_a = false, "system"_a = "",
        "query_template"_a = format::kDefaultQueryTemplate, "threads"_a = 0, "chunk"_a = 2000,
        "scorer"_a = "", "stream"_a = false, "progress"_a = nb::none());
  m.def("search", &library_search, "dir"_a, "question"_a, "top_k"_a = 4, "model"_a = nb::none());
  m.def("ask", &library_ask, "model"_a, "dir"_a, "question"_a, "top_k"_a = 4, "max_tokens"_a = 128,
        "blend"_a = nb::none(), "threads"_a = 0);
}

// The class Session: the answers of one cache.
void bind_session(nb::module_& m) {
  nb::class_<Session>(m, "Session")
      .def_static("open", &open_session, "model"_a, "path"_a, "force"_a = false,
                  "matmul"_a = "fast", "threads"_a = 0, "kv_f32"_a = false)
      .def("ask", &ask, "question"_a, "max_tokens"_a = 128, "temperature"_a = 0.0f, "seed"_a = 0,
           "on_text"_a = nb::none())
      .def("header", [](const Session& s) { return header_dict(s.s->header()); })
      .def_prop_ro("load_ms", [](const Session& s) { return s.s->load_ms(); });
}

}  // namespace

NB_MODULE(_kvzip, m) {
  m.doc() = "kvzip's C++ library: .kvz files, compression and answers";
  m.attr("__version__") = KVZIP_VERSION;

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      nb::object cls =
          nb::module_::import_("kvzip.errors").attr("error_class")(static_cast<int>(e.code()));
      PyErr_SetString(cls.ptr(), e.what());
    }
  });

  m.def("hdf5_available", &format::hdf5_available);
  m.def(
      "export_hdf5",
      [](const std::string& cache, const std::string& out, bool force) {
        const auto r = format::CacheReader::open(cache);
        format::export_hdf5(r.load(), out, force);
      },
      "cache"_a, "out"_a, "force"_a = false);

  bind_reader(m);
  m.def("write", &write_file, "path"_a, "header"_a, "layers"_a, "kv_dtype"_a = "f32",
        "kv_group"_a = 0, "zstd"_a = 0, "force"_a = false);

  bind_model(m);
  bind_scorer(m);
  bind_session(m);
}
