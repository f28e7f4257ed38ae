// From format::CacheContents / CacheReader to RaggedKvCache, QuantBase and GpuCache, and
// QuerySession.
#include "loader/loader.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <type_traits>

#include "common/error.h"
#include "common/half.h"
#include "kernels/attention.h"
#include "kernels/gpu.h"
#include "kernels/kv_quant.h"
#include "kernels/matmul.h"

namespace kvzip::loader {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Fills the rows of `cache` layer `l` from a head-major (R, D) K and V pair and positions.
void fill_layer(model::RaggedKvCache& cache, uint32_t l, const float* k, const float* v,
                std::span<const uint32_t> positions) {
  const model::CacheShape s = cache.shape();
  const size_t D = s.head_dim;
  size_t row = 0;
  for (uint32_t h = 0; h < s.n_kv_heads; ++h) {
    const size_t n = cache.kept(l, h);
    std::memcpy(cache.k_rows(l, h), k + row * D, n * D * sizeof(float));
    std::memcpy(cache.v_rows(l, h), v + row * D, n * D * sizeof(float));
    std::memcpy(cache.positions(l, h), positions.data() + row, n * sizeof(uint32_t));
    row += n;
  }
}

std::vector<uint32_t> kept_counts(const format::CacheHeader& h,
                                  const std::function<std::span<const uint32_t>(uint32_t)>& rows) {
  std::vector<uint32_t> kept;
  kept.reserve(size_t(h.n_layers) * h.n_kv_heads);
  for (uint32_t l = 0; l < h.n_layers; ++l) {
    auto r = rows(l);
    kept.insert(kept.end(), r.begin(), r.end());
  }
  return kept;
}

model::CacheShape shape_of(const format::CacheHeader& h) {
  return model::CacheShape{h.n_layers, h.n_kv_heads, h.head_dim};
}

// (Hkv) f16 rows of each head of a q8/q4 layer: a head's f16 rows (positions < kv_f16_below) are
// its first ones, since positions increase within a head; its quantized rows follow.
std::vector<uint32_t> f16_rows_per_head(const format::CacheHeader& h,
                                        std::span<const uint32_t> head_rows,
                                        std::span<const uint32_t> positions) {
  std::vector<uint32_t> dense(head_rows.size(), 0);
  size_t row = 0;
  for (size_t hd = 0; hd < head_rows.size(); ++hd)
    for (uint32_t i = 0; i < head_rows[hd]; ++i, ++row)
      dense[hd] += positions[row] < h.kv_f16_below;
  return dense;
}

std::vector<uint32_t> f16_rows_per_head(const format::CacheHeader& h, const format::LayerKv& q) {
  return f16_rows_per_head(h, q.head_rows, q.positions);
}

// y <- the f16 rows x widened to f32 (a q8/q4 file's f16-stored rows, exactly).
void widen_f16(const std::vector<uint16_t>& x, std::vector<float>& y) {
  y.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = f16_to_f32(x[i]);
}

// The kernels' view of the file's one q8/q4 layout (spec §12.1): rotated rows, byte parameters.
kernels::KvQuantLayout quant_layout(const format::CacheHeader& h) {
  return kernels::KvQuantLayout{format::dtype_bits(h.kv_dtype), h.head_dim, h.kv_group_size,
                                /*rotated=*/true,
                                /*byte_params=*/true};
}

}  // namespace

struct QuerySession::Loaded {
  format::CacheHeader header;
  model::KvBase base;
  double ms;
  std::optional<format::CacheReader> reader;  // Device::Cuda: what to_device reads the rows from
};

QuerySession::Loaded QuerySession::open_file(const model::Model& model, const std::string& path,
                                             const SessionOptions& o) {
  const auto t0 = Clock::now();
  format::OpenOptions oo;
  oo.verify = o.verify;
  format::CacheReader reader = format::CacheReader::open(path, oo);
  reader.check_model(model.fingerprint(), o.force);
  format::check_shape(reader.header(), model.config());
  // On the GPU the device gets the rows from the file (gpu_cache_from_reader: a q8/q4 file's rows
  // kept as stored there too, unless kv_form is F32) and the host base stays as the CPU would
  // keep it: a q8/q4 file quantized, so no whole-cache f32 copy is made on the host.
  const bool gpu = o.device == kernels::Device::Cuda;
  model::KvBase base = base_from_reader(reader, o.room, o.kv_form, o.key_tiles && !gpu);
  QuerySession::Loaded loaded{reader.header(), std::move(base), ms_since(t0), std::nullopt};
  if (gpu) loaded.reader.emplace(std::move(reader));
  return loaded;
}

namespace {

// gpu_cache_from_reader for a q8/q4 file with KvForm::F32: per layer the stored rows (codes, group
// parameters, channel scales) go to device scratch as they are and kernels::kv_dequantize_rows
// writes each head's quantized rows into the cache on the device (the same bits as the host's
// format::dequantize_rows); a head's f16 rows, its first ones, are widened on the host and copied
// in front of them. A seventh (q4) to a quarter (q8) of the f32 bytes cross the bus, and the host
// never holds a layer in f32.
void fill_quantized(const format::CacheReader& reader, model::GpuCache& cache, void* stream) {
  const format::CacheHeader& h = reader.header();
  const size_t D = h.head_dim;
  const kernels::KvQuantLayout layout = quant_layout(h);
  const kernels::Exec gpu{kernels::Device::Cuda, nullptr, stream};
  struct Side {  // one of K, V: device scratch for a layer's stored rows
    kernels::gpu::GpuBuffer<float> scale;
    kernels::gpu::GpuBuffer<uint16_t> params;
    kernels::gpu::GpuBuffer<uint8_t> codes;
    kernels::gpu::GpuBuffer<float> dense;
    std::vector<float> dense_host;
  } sk, sv;
  auto put = [stream](auto& buf, const auto& x) {  // x to device scratch that grows as needed
    using T = typename std::decay_t<decltype(x)>::value_type;
    if (buf.size() < x.size()) buf = kernels::gpu::GpuBuffer<T>(x.size());
    if (!x.empty())
      kernels::gpu::copy_to_device(buf.data(), x.data(), x.size() * sizeof(T), stream);
  };
  auto load = [&](Side& side, const format::QuantRows& q) {
    put(side.scale, q.channel_scale);
    put(side.params, q.params);
    put(side.codes, q.codes);
    widen_f16(q.dense, side.dense_host);
    put(side.dense, side.dense_host);
  };
  for (uint32_t l = 0; l < h.n_layers; ++l) {
    const format::LayerKv q = reader.read_quant_layer(l);
    load(sk, q.qk);
    load(sv, q.qv);
    const std::vector<uint32_t> head_dense = f16_rows_per_head(h, q);
    size_t dense_row = 0, quant_row = 0;  // head hd's first f16 and first quantized row
    cache.fill_layer(l, q.positions.data(), [&](uint32_t hd, float* k, float* v) {
      const uint32_t n = q.head_rows[hd], nd = head_dense[hd];
      if (nd > 0) {
        kernels::gpu::copy_device(k, sk.dense.data() + dense_row * D,
                                  size_t(nd) * D * sizeof(float), stream);
        kernels::gpu::copy_device(v, sv.dense.data() + dense_row * D,
                                  size_t(nd) * D * sizeof(float), stream);
      }
      auto rows = [&](Side& side) {
        return kernels::KvQuantRows{layout, n - nd, side.scale.data() + size_t(hd) * D,
                                    side.params.data() + quant_row * layout.param_words(),
                                    side.codes.data() + quant_row * layout.code_bytes()};
      };
      kernels::kv_dequantize_rows(gpu, rows(sk), k + size_t(nd) * D);
      kernels::kv_dequantize_rows(gpu, rows(sv), v + size_t(nd) * D);
      dense_row += nd;
      quant_row += n - nd;
    });
    // The scratch is reused by the next layer: its copies and kernels must have run.
    kernels::gpu::synchronize(stream);
  }
}

// gpu_cache_from_reader for a q8/q4 file kept as stored (KvForm::Auto): the cache's f32 rows are
// each head's f16 rows (its first ones), widened on the host; the quantized rows' channel scales,
// parameters and codes go to a GpuQuantBase as the file stores them, and the cache attaches it.
// The device never holds a quantized row in f32, and a seventh (q4) to a quarter (q8) of the f32
// bytes cross the bus.
model::GpuCache gpu_quantized_cache(const format::CacheReader& reader, uint32_t room,
                                    void* stream) {
  const format::CacheHeader& h = reader.header();
  const size_t D = h.head_dim;
  std::vector<uint32_t> dense, quant;  // (L·Hkv) per head: f16 rows, quantized rows
  for (uint32_t l = 0; l < h.n_layers; ++l) {
    const auto rows = reader.head_rows(l);
    const std::vector<uint32_t> d = f16_rows_per_head(h, rows, reader.positions(l));
    for (size_t hd = 0; hd < rows.size(); ++hd) {
      dense.push_back(d[hd]);
      quant.push_back(rows[hd] - d[hd]);
    }
  }
  model::GpuCache cache = model::GpuCache::with_layout(
      shape_of(h), static_cast<uint32_t>(h.logical_length()), dense, room);
  model::GpuQuantBase base(shape_of(h), quant_layout(h), std::move(quant));
  std::vector<float> dk, dv;
  std::vector<uint32_t> dpos;  // (F) the f16 rows' positions, head-major
  for (uint32_t l = 0; l < h.n_layers; ++l) {
    const format::LayerKv q = reader.read_quant_layer(l);
    base.upload_layer(
        l,
        {q.qk.channel_scale, q.qv.channel_scale, q.qk.params, q.qv.params, q.qk.codes, q.qv.codes},
        stream);
    widen_f16(q.qk.dense, dk);
    widen_f16(q.qv.dense, dv);
    dpos.clear();
    size_t row = 0;
    for (size_t hd = 0; hd < q.head_rows.size(); ++hd) {
      const uint32_t nd = dense[size_t(l) * h.n_kv_heads + hd];
      dpos.insert(dpos.end(), q.positions.begin() + row, q.positions.begin() + row + nd);
      row += q.head_rows[hd];
    }
    KVZIP_ASSERT(dk.size() == dpos.size() * D &&
                 dv.size() == dk.size());  // the reader splits by the same rule
    cache.upload_layer(l, dk.data(), dv.data(), dpos.data(), stream);
    kernels::gpu::synchronize(stream);  // the host arrays are reused by the next layer
  }
  cache.attach_quant(std::move(base));
  return cache;
}

}  // namespace

model::GpuCache gpu_cache_from_reader(const format::CacheReader& reader, uint32_t room,
                                      void* stream, KvForm form) {
  const format::CacheHeader& h = reader.header();
  if (format::dtype_quantized(h.kv_dtype) && form == KvForm::Auto)
    return gpu_quantized_cache(reader, room, stream);
  const auto kept = kept_counts(h, [&](uint32_t l) { return reader.head_rows(l); });
  model::GpuCache cache = model::GpuCache::with_layout(
      shape_of(h), static_cast<uint32_t>(h.logical_length()), kept, room);
  if (format::dtype_quantized(h.kv_dtype)) {
    fill_quantized(reader, cache, stream);
    return cache;
  }
  const size_t D = h.head_dim;
  cache.upload_layers(
      [&](uint32_t l, float* k, float* v, uint32_t* positions) {
        const size_t n = size_t(reader.layer_rows(l)) * D;
        if (auto view = reader.kv_view(l)) {  // raw f32: from the mapping into pinned memory
          std::copy_n(view->k.data(), n, k);
          std::copy_n(view->v.data(), n, v);
        } else {
          reader.read_kv(l, std::span<float>(k, n), std::span<float>(v, n));
        }
        const auto pos = reader.positions(l);
        std::copy(pos.begin(), pos.end(), positions);
      },
      stream);
  return cache;
}

model::RaggedKvCache cache_from_reader(const format::CacheReader& reader, uint32_t room) {
  const format::CacheHeader& h = reader.header();
  auto kept = kept_counts(h, [&](uint32_t l) { return reader.head_rows(l); });
  model::RaggedKvCache cache(shape_of(h), static_cast<uint32_t>(h.logical_length()), kept, room);
  std::vector<float> k, v;
  for (uint32_t l = 0; l < h.n_layers; ++l) {
    const auto pos = reader.positions(l);
    if (auto view = reader.kv_view(l)) {  // raw f32 section: read straight from the mapping
      fill_layer(cache, l, view->k.data(), view->v.data(), pos);
    } else {
      const size_t n = size_t(reader.layer_rows(l)) * h.head_dim;
      k.resize(n);
      v.resize(n);
      reader.read_kv(l, k, v);
      fill_layer(cache, l, k.data(), v.data(), pos);
    }
  }
  return cache;
}

model::QuantBase quant_base_from_reader(const format::CacheReader& reader) {
  const format::CacheHeader& h = reader.header();
  if (!format::dtype_quantized(h.kv_dtype))
    throw Error(Errc::invalid_argument, std::string("quant_base_from_reader: the cache stores ") +
                                            format::dtype_name(h.kv_dtype) + " rows, not q8/q4");
  const kernels::KvQuantLayout layout = quant_layout(h);
  std::vector<model::QuantBaseLayer> layers(h.n_layers);
  for (uint32_t l = 0; l < h.n_layers; ++l) {
    format::LayerKv q = reader.read_quant_layer(l);
    model::QuantBaseLayer& L = layers[l];
    L.head_dense = f16_rows_per_head(h, q);
    widen_f16(q.qk.dense, L.dense_k);
    widen_f16(q.qv.dense, L.dense_v);
    L.head_rows = std::move(q.head_rows);
    L.positions = std::move(q.positions);
    L.scale_k = std::move(q.qk.channel_scale);
    L.scale_v = std::move(q.qv.channel_scale);
    L.params_k = std::move(q.qk.params);
    L.params_v = std::move(q.qv.params);
    L.codes_k = std::move(q.qk.codes);
    L.codes_v = std::move(q.qv.codes);
  }
  return model::QuantBase(shape_of(h), static_cast<uint32_t>(h.logical_length()), layout,
                          std::move(layers));
}

model::KvBase base_from_reader(const format::CacheReader& reader, uint32_t room, KvForm form,
                               bool key_tiles) {
  // A hybrid model's file loads dequantized: sliding-window attention has no kernel over
  // quantized rows (kernels/attention.h AttentionArgs::window).
  if (form == KvForm::Auto && format::dtype_quantized(reader.header().kv_dtype) &&
      reader.header().local_layers.empty())
    return model::KvBase(quant_base_from_reader(reader));
  model::RaggedKvCache cache = cache_from_reader(reader, room);
  if (key_tiles) cache.make_key_tiles();
  return model::KvBase(std::move(cache));
}

uint64_t base_bytes_bound(const format::CacheReader& reader, uint32_t room, KvForm form,
                          bool key_tiles) {
  const format::CacheHeader& h = reader.header();
  const uint64_t D = h.head_dim;
  const bool quantized =
      form == KvForm::Auto && format::dtype_quantized(h.kv_dtype) && h.local_layers.empty();
  uint64_t n = 0;
  for (uint32_t l = 0; l < h.n_layers; ++l)
    for (const uint32_t kept : reader.head_rows(l)) {
      if (quantized) {  // a head's f16 rows (at most kv_f16_below) widen to f32; the rest stay
                        // codes
        const kernels::KvQuantLayout layout = quant_layout(h);
        const uint64_t dense = std::min<uint64_t>(kept, h.kv_f16_below);
        n += 2 * (dense * D * sizeof(float) + D * sizeof(float) +
                  kept * (layout.code_bytes() + layout.param_words() * sizeof(uint16_t)));
      } else {
        n += 2 * (uint64_t{kept} + room) * D * sizeof(float);
        if (key_tiles) n += kernels::key_tile_floats(kept, h.head_dim) * sizeof(float);
      }
    }
  return n;
}

model::RaggedKvCache cache_from_contents(const format::CacheContents& c, uint32_t room) {
  format::validate(c);
  const format::CacheHeader& h = c.header;
  auto kept =
      kept_counts(h, [&](uint32_t l) { return std::span<const uint32_t>(c.layers[l].head_rows); });
  model::RaggedKvCache cache(shape_of(h), static_cast<uint32_t>(h.logical_length()), kept, room);
  for (uint32_t l = 0; l < h.n_layers; ++l)
    fill_layer(cache, l, c.layers[l].k.data(), c.layers[l].v.data(), c.layers[l].positions);
  return cache;
}

std::string query_template(const format::CacheHeader& header) {
  for (const auto& [k, v] : header.params)
    if (k == "query_template") return v;
  return format::kDefaultQueryTemplate;
}

std::vector<int32_t> question_tokens(const model::Tokenizer& tokenizer,
                                     const format::CacheHeader& header, std::string_view question) {
  return question_tokens(tokenizer, query_template(header), header.suffix_tokens, question);
}

std::vector<int32_t> conversation_tokens(
    const model::Model& model, const format::CacheHeader& header,
    std::span<const std::pair<std::string, std::string>> history, std::string_view question) {
  if (history.empty()) return question_tokens(model.tokenizer(), header, question);
  std::vector<int32_t> ids = question_tokens(model.tokenizer(), header, history[0].first);
  for (size_t i = 0; i < history.size(); ++i) {
    const std::string_view next =
        i + 1 < history.size() ? std::string_view(history[i + 1].first) : question;
    const std::vector<int32_t> turn = model.chat().next_turn(history[i].second, next);
    ids.insert(ids.end(), turn.begin(), turn.end());
  }
  return ids;
}

std::vector<int32_t> question_tokens(const model::Tokenizer& tokenizer,
                                     std::string_view query_template,
                                     std::span<const uint32_t> suffix, std::string_view question) {
  std::string tail(query_template);
  const std::string key = "{question}";
  const size_t at = tail.find(key);
  if (at == std::string::npos)
    throw Error(Errc::corrupt,
                "the cache's query_template has no {question} placeholder: \"" + tail + "\"");
  tail.replace(at, key.size(), question);
  std::vector<int32_t> ids = tokenizer.encode(tail, /*parse_special=*/false);
  for (uint32_t t : suffix) {
    if (t >= static_cast<uint32_t>(tokenizer.vocab_size()))
      throw Error(Errc::corrupt, "the cache's suffix template holds token id " + std::to_string(t) +
                                     " outside the model's vocabulary");
    ids.push_back(static_cast<int32_t>(t));
  }
  return ids;
}

static model::ForwardOptions forward_options(const SessionOptions& o) {
  model::ForwardOptions fo;
  fo.threads = o.threads;
  fo.matmul = o.matmul;
  // Questions go in chunks the matmul's 8-bit path takes (kernels/matmul.h): a token's result is
  // then the same bits whatever the chunk, so a long question gives the answer `kvzip serve`
  // gives when it splits it into step-sized pieces, on every CPU. Questions are short: the
  // chunking costs nothing measurable.
  fo.chunk = kernels::kMatmulInt8MaxT;
  return fo;
}

QuerySession::QuerySession(const model::Model& model, const std::string& path,
                           const SessionOptions& o)
    : QuerySession(model, open_file(model, path, o), o) {}

namespace {
// A composition appends only to its own rows (cache/composed_cache.h): its caches need no room.
SessionOptions composing(const SessionOptions& o, size_t n_paths) {
  SessionOptions c = o;
  if (n_paths > 1) c.room = 0;
  return c;
}
}  // namespace

QuerySession::QuerySession(const model::Model& model, const std::vector<std::string>& paths,
                           const SessionOptions& o)
    : QuerySession(model, open_file(model, paths.at(0), composing(o, paths.size())), o) {
  if (paths.size() == 1) return;
  if (o.device == kernels::Device::Cuda)
    throw Error(Errc::unsupported,
                "several caches are composed on the CPU only; answer them on the CPU");
  if (paths.size() > o.compose.max_docs)
    throw Error(Errc::invalid_argument,
                std::to_string(paths.size()) + " caches given; a composition takes at most " +
                    std::to_string(o.compose.max_docs) + " (option compose.max_docs raises it)");
  const auto t0 = Clock::now();
  for (size_t i = 1; i < paths.size(); ++i) {
    Loaded l = open_file(model, paths[i], composing(o, paths.size()));
    more_headers_.push_back(std::move(l.header));
    more_bases_.push_back(std::make_unique<model::KvBase>(std::move(l.base)));
  }
  load_ms_ += ms_since(t0);
  std::vector<const format::CacheHeader*> headers{&header_};
  std::vector<const model::KvBase*> bases{&base_};
  for (size_t i = 0; i < more_bases_.size(); ++i) {
    headers.push_back(&more_headers_[i]);
    bases.push_back(more_bases_[i].get());
  }
  check_composable(headers, paths, o.force);
  branch_.reset();  // a composition reads the bases through its own view
  composed_ = compose(forward_, model.tokenizer(), headers, bases, o.compose, &compose_stats_);
}

uint64_t QuerySession::bytes_in_memory() const {
  uint64_t b = base_.bytes_in_memory();
  for (const auto& m : more_bases_) b += m->bytes_in_memory();
  if (composed_) b += composed_->bytes_owned();
  return b;
}

QuerySession::QuerySession(const model::Model& model, Loaded loaded, const SessionOptions& o)
    : model_(model),
      header_(std::move(loaded.header)),
      base_(std::move(loaded.base)),
      forward_(model.weights(), forward_options(o)),
      load_ms_(loaded.ms) {
  if (o.device == kernels::Device::Cuda) to_device(o, loaded.reader ? &*loaded.reader : nullptr);
  else if (base_.quantized()) branch_ = std::make_unique<model::BranchCache>(base_.quant(), o.room);
}

QuerySession::QuerySession(const model::Model& model, model::RaggedKvCache cache,
                           format::CacheHeader header, const SessionOptions& o)
    : model_(model),
      header_(std::move(header)),
      base_(std::move(cache)),
      forward_(model.weights(), forward_options(o)) {
  format::check_shape(header_, model.config());
  if (o.device == kernels::Device::Cuda) to_device(o, nullptr);
}

void QuerySession::to_device(const SessionOptions& o, const format::CacheReader* reader) {
  const auto t0 = Clock::now();
  gpu_forward_ = std::make_unique<model::GpuForward>(model_.weights());
  gpu_cache_ = std::make_unique<model::GpuCache>(
      reader ? gpu_cache_from_reader(*reader, o.room, gpu_forward_->stream(), o.kv_form)
             : model::GpuCache::from_ragged(base_.f32("the CUDA upload"), o.room,
                                            gpu_forward_->stream()));
  load_ms_ += ms_since(t0);
}

Answer QuerySession::ask(std::string_view question, const model::GenerateParams& params,
                         const std::function<void(const std::string&)>& on_text) {
  Answer a;
  a.question = std::string(question);
  const std::vector<int32_t> prompt = question_tokens(model_.tokenizer(), header_, question);
  model::StreamDecoder dec(model_.tokenizer());
  const auto t0 = Clock::now();
  bool first = true;
  model::GenerateParams gp = params;
  if (gp.rkv && branch_)
    throw Error(Errc::unsupported,
                "R-KV evicts rows of an f32 cache, but this session attends to the file's " +
                    std::string(format::dtype_name(header_.kv_dtype)) +
                    " rows in place; open it with SessionOptions::kv_form = KvForm::F32");
  auto on_token = [&](int32_t tok) {
    if (first) a.first_token_ms = ms_since(t0), first = false;
    std::string piece = dec.push(tok);
    a.text += piece;
    if (on_text && !piece.empty()) on_text(piece);
    return true;
  };
  if (gp.rkv && composed_)
    throw Error(Errc::unsupported, "R-KV does not run over several composed caches");
  model::GenerateResult r;
  if (composed_) {  // the documents are read-only; the question and answer rows are the view's own
    struct Rollback {
      model::ComposedCache& c;
      ~Rollback() { c.rollback(c.composed_length()); }
    } rollback{*composed_};
    r = generate(forward_, *composed_, prompt, gp, on_token);
  } else if (gpu_cache_) {  // the device holds the compressed state; back to it however ask() ends
    struct Reset {
      model::GpuCache& g;
      ~Reset() { g.reset(); }
    } reset{*gpu_cache_};
    r = generate(*gpu_forward_, *gpu_cache_, prompt, gp, on_token);
  } else if (
      branch_) {  // the base is read-only; the question and answer rows go to the branch's tail
    struct Rollback {
      model::BranchCache& b;
      ~Rollback() { b.rollback(b.base_length()); }
    } rollback{*branch_};
    r = generate(forward_, *branch_, prompt, gp, on_token);
  } else {
    model::RaggedKvCache& cache = base_.f32("QuerySession::ask");
    // R-KV may evict document rows too (doc candidates): then the compressed state is restored
    // from a copy, otherwise evictions touch appended rows only and reset() restores it.
    std::optional<model::RaggedKvCache> snapshot;
    if (gp.rkv && gp.rkv->doc_candidates) {
      gp.rkv->pinned = static_cast<uint32_t>(header_.prefix_length());
      snapshot = cache;
    }
    struct Reset {  // back to the compressed state however ask() ends
      model::RaggedKvCache& c;
      std::optional<model::RaggedKvCache>& saved;
      ~Reset() {
        if (saved) c = std::move(*saved);
        else c.reset();
      }
    } reset{cache, snapshot};
    r = generate(forward_, cache, prompt, gp, on_token);
  }
  std::string tail = dec.finish();
  a.text += tail;
  if (on_text && !tail.empty()) on_text(tail);
  a.ms = ms_since(t0);
  if (first) a.first_token_ms = a.ms;
  a.tokens = std::move(r.tokens);
  a.stopped = r.stopped;
  a.first_logits = std::move(r.first_logits);
  a.evicted = r.evicted;
  return a;
}

}  // namespace kvzip::loader
