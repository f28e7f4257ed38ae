// [cuda] the GPU forward pass, cache and KVzip scorer against the CPU ones on a small random
// model with a head dim the kernels take (D = 64) and q/k/v biases. The GPU rounds weights and
// GEMM inputs to bf16, so the CPU side runs on the same bf16-rounded weights and the tolerance is
// that of bf16 activations (2e-2 relative on logits and scores); the greedy token agrees up to
// near-ties (within that tolerance of the best CPU logit). The device cache itself: a growth whose
// allocation fails at a layer (injected through the shared RaggedLayout seam) keeps every row,
// and from_ragged copies the base of a host cache, refusing one with appended rows. A q8/q4 file
// kept as stored on the device (a GpuQuantBase attended in place) answers like the CPU's
// quantized base and like the same file dequantized into device memory.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "common/half.h"
#include "tests/cuda/support.h"

#if KVZIP_HAVE_CUDA
#include "cache/branch_cache.h"
#include "cache/gpu_cache.h"
#include "cache/quant_base.h"
#include "cache/ragged_layout.h"
#include "common/error.h"
#include "compress/pipeline.h"
#include "compress/quantize.h"
#include "format/format.h"
#include "loader/loader.h"
#include "model/forward.h"
#include "model/gpu_forward.h"
#include "model/prefill.h"
#include "model/sampling.h"
#include "tests/support/random_weights.h"

using namespace kvzip;
using test::gpu_ready;

namespace {

ModelConfig gpu_test_config() {
  ModelConfig c = test::tiny_qwen2_config();  // biases, untied head, G = 3
  c.n_layers = 2;
  c.d_model = 96;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.head_dim = 64;
  c.d_ffn = 160;
  c.vocab_size = 101;
  return c;
}

// The same matrix with every value rounded to bf16 (an owned fp32 copy, canonical rows).
void round_bf16(model::Matrix& m) {
  if (m.empty()) return;
  std::vector<float> x = to_f32(m);
  for (float& v : x) v = bf16_to_f32(f32_to_bf16(v));
  m = model::Matrix::from_f32(x, m.rows, m.cols, m.name);
}

// The CPU twin of what the GPU holds: every matrix and the embeddings rounded to bf16.
model::Weights bf16_weights(model::Weights w) {
  round_bf16(w.tok_embd);
  round_bf16(w.output);
  for (model::LayerWeights& l : w.layers)
    for (auto* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) round_bf16(*m);
  return w;
}

// The GPU's greedy pick is the CPU's, or within bf16 noise of the CPU's best logit (a near-tie
// may legitimately flip).
bool same_pick(const std::vector<float>& cpu, const std::vector<float>& gpu) {
  float hi = 0;
  for (float x : cpu) hi = std::max(hi, std::fabs(x));
  return cpu[model::argmax(gpu)] >= cpu[model::argmax(cpu)] - 2e-2f * hi;
}

std::vector<int32_t> tokens(size_t n, uint64_t seed) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = int32_t((i * 37 + seed * 11) % 101);
  return t;
}

}  // namespace

TEST_CASE("gpu forward prefill and decode match the CPU forward on bf16 weights", "[cuda]") {
  if (!gpu_ready()) return;
  const model::Weights w = bf16_weights(test::random_weights(gpu_test_config(), test::seed(7)));
  model::Forward cpu(w, model::ForwardOptions{});
  model::GpuForwardOptions go;
  go.chunk = 50;  // several chunks
  model::GpuForward gpu(w, go);
  const auto prompt = tokens(130, 1);
  model::KvCache cc(w.config, 200);
  model::GpuCache gc(model::cache_shape(w.config), 8);  // grows while prefilling
  const auto a = cpu.prefill(cc, prompt, model::LogitsMode::All);
  const auto b = gpu.prefill(gc, prompt, model::LogitsMode::All);
  CHECK(test::rel_error(b, a) < 2e-2);
  REQUIRE(gc.logical_length() == 130);
  for (int step = 0; step < 4; ++step) {
    const auto la = cpu.decode(cc, 5 + step), lb = gpu.decode(gc, 5 + step);
    CHECK(test::rel_error(lb, la) < 2e-2);
    CHECK(same_pick(la, lb));
  }
  // The keys the GPU cached are the CPU's (post-RoPE), within bf16 activation error.
  const model::KvCache back = gc.to_host_dense();
  for (uint32_t l = 0; l < w.config.n_layers; ++l)
    for (uint32_t h = 0; h < w.config.n_kv_heads; ++h) {
      const model::KvHeadView x = back.view(l, h), y = cc.view(l, h);
      REQUIRE(x.len == y.len);
      CHECK(test::rel_error(x.k, y.k, size_t(x.len) * 64) < 2e-2);
      CHECK(test::rel_error(x.v, y.v, size_t(x.len) * 64) < 2e-2);
    }
}

TEST_CASE("gpu forward over a ragged cache from the host decodes like the CPU and rolls back",
          "[cuda]") {
  if (!gpu_ready()) return;
  const model::Weights w = bf16_weights(test::random_weights(gpu_test_config(), test::seed(8)));
  model::Forward cpu(w, model::ForwardOptions{});
  model::GpuForward gpu(w);
  model::KvCache dense(w.config, 300);
  cpu.prefill(dense, tokens(300, 2), model::LogitsMode::None);
  // Ragged: each head keeps a different subset (every k-th row), 300 logical positions.
  std::vector<std::vector<uint32_t>> keep(size_t(w.config.n_layers) * w.config.n_kv_heads);
  for (size_t i = 0; i < keep.size(); ++i)
    for (uint32_t r = 0; r < 300; r += uint32_t(1 + i)) keep[i].push_back(r);
  model::RaggedKvCache host = model::RaggedKvCache::from_dense(dense, keep, 16);
  model::GpuCache dev = model::GpuCache::from_ragged(host, 4);  // small room: appends regrow it
  const auto question = tokens(9, 3);
  for (int round = 0; round < 2; ++round) {  // the second round starts from the reset state
    const auto a = cpu.prefill(host, question, model::LogitsMode::Last);
    const auto b = gpu.prefill(dev, question, model::LogitsMode::Last);
    CHECK(test::rel_error(b, a) < 2e-2);
    CHECK(same_pick(a, b));
    CHECK(dev.logical_length() == 309);
    host.reset();
    dev.reset();
    CHECK(dev.logical_length() == 300);
    for (size_t i = 0; i < keep.size(); ++i)
      CHECK(dev.len(uint32_t(i / w.config.n_kv_heads), uint32_t(i % w.config.n_kv_heads)) ==
            keep[i].size());
  }
}

namespace {

// Head (l, h)'s used K rows on the device, as the host sees them.
std::vector<float> device_rows(const model::GpuCache& c, uint32_t l, uint32_t h) {
  std::vector<float> out(size_t(c.len(l, h)) * c.shape().head_dim);
  kernels::gpu::copy_to_host(out.data(), c.k(l, h), out.size() * sizeof(float));
  return out;
}

}  // namespace

TEST_CASE("gpu cache: a failed growth keeps every row; from_ragged copies the base only",
          "[cuda]") {
  if (!gpu_ready()) return;
  struct Disarm {
    ~Disarm() { model::testing::fail_layer_allocation(-1); }
  } disarm;
  const model::CacheShape shape{3, 2, 64};
  model::KvCache dense(shape, 40);
  dense.reserve_append(40);
  const auto kv = test::random_vector(40 * 2 * 64, test::seed(10));
  for (uint32_t l = 0; l < 3; ++l) dense.append(l, kv.data(), kv.data(), 40);
  dense.commit_append(40);
  std::vector<std::vector<uint32_t>> keep(6);
  for (size_t i = 0; i < keep.size(); ++i)
    for (uint32_t r = uint32_t(i); r < 40; r += 3) keep[i].push_back(r);
  model::RaggedKvCache host = model::RaggedKvCache::from_dense(dense, keep, 8);

  // A host cache holding appended rows is refused: a copy of its kept rows would lose them.
  host.reserve_append(2);
  for (uint32_t l = 0; l < 3; ++l) host.append(l, kv.data(), kv.data(), 2);
  host.commit_append(2);
  CHECK_THROWS_AS(model::GpuCache::from_ragged(host, 4), Error);
  host.reset();
  model::GpuCache dev = model::GpuCache::from_ragged(host, 2);
  CHECK(dev.logical_length() == 40);
  CHECK(dev.base_length() == 40);

  // Appended rows on the device, then growth fails at layer 1 (layer 0 already staged).
  auto tok = test::to_gpu(test::random_vector(3 * 2 * 64, test::seed(11)));
  dev.reserve_append(2);
  for (uint32_t l = 0; l < 3; ++l) dev.append(l, tok.data(), tok.data(), 2, nullptr);
  dev.commit_append(2);
  std::vector<std::vector<float>> before;
  for (uint32_t l = 0; l < 3; ++l)
    for (uint32_t h = 0; h < 2; ++h) before.push_back(device_rows(dev, l, h));
  model::testing::fail_layer_allocation(1);
  CHECK_THROWS_AS(dev.reserve_append(3), Error);
  for (uint32_t l = 0; l < 3; ++l)
    for (uint32_t h = 0; h < 2; ++h) REQUIRE(device_rows(dev, l, h) == before[l * 2 + h]);
  // Growth succeeds now and moves every row; the appended rows roll back as on the host.
  dev.reserve_append(3);
  for (uint32_t l = 0; l < 3; ++l) dev.append(l, tok.data(), tok.data(), 3, nullptr);
  dev.commit_append(3);
  CHECK(dev.logical_length() == 45);
  for (uint32_t l = 0; l < 3; ++l)
    for (uint32_t h = 0; h < 2; ++h) {
      const auto now = device_rows(dev, l, h);
      REQUIRE(std::equal(before[l * 2 + h].begin(), before[l * 2 + h].end(), now.begin()));
    }
  dev.reset();
  for (uint32_t l = 0; l < 3; ++l)
    for (uint32_t h = 0; h < 2; ++h) {
      CHECK(dev.len(l, h) == host.kept(l, h));
      const auto now = device_rows(dev, l, h);
      const float* want = host.k_rows(l, h);
      CHECK(std::equal(now.begin(), now.end(), want));
    }
}

TEST_CASE("gpu KVzip scores rank document rows like the CPU scorer", "[cuda]") {
  if (!gpu_ready()) return;
  const model::Weights w = bf16_weights(test::random_weights(gpu_test_config(), test::seed(9)));
  model::Forward cpu(w, model::ForwardOptions{});
  model::GpuForward gpu(w);
  const auto prefix = tokens(7, 4), doc = tokens(150, 5);
  compress::ScorerOptions so;
  so.prompts.first = tokens(5, 6);
  so.prompts.next = tokens(6, 7);
  so.prompts.turn_end = tokens(3, 8);
  so.kvzip_chunk = 60;  // three reconstruction chunks, the last one short
  prefill::PrefillResult pre = prefill::prefill_document(cpu, prefix, doc);
  const compress::DocumentScores cs =
      compress::make_scorer("kvzip", so)->score(compress::ScoreInput{&cpu, &pre.cache, 7, doc});
  model::GpuCache gc(model::cache_shape(w.config), 400);
  std::vector<int32_t> all = prefix;
  all.insert(all.end(), doc.begin(), doc.end());
  gpu.prefill(gc, all, model::LogitsMode::None);
  const compress::DocumentScores gs = compress::kvzip_scores_gpu(gpu, gc, 7, doc, so);
  REQUIRE(gs.values.size() == cs.values.size());
  CHECK(gc.logical_length() == 157);  // the reconstruction passes were rolled back
  CHECK(test::rel_error(gs.values, cs.values) < 2e-2);
  // The same rows survive a ratio-0.3 selection, up to near-ties.
  const compress::Selection a = compress::select_rows(cs, 0.3, compress::SelectionLevel::Global);
  const compress::Selection b = compress::select_rows(gs, 0.3, compress::SelectionLevel::Global);
  uint64_t same = 0, total = 0;
  for (size_t i = 0; i < a.keep.size(); ++i) {
    for (uint32_t r : a.keep[i]) same += std::binary_search(b.keep[i].begin(), b.keep[i].end(), r);
    total += a.keep[i].size();
  }
  CHECK(double(same) / double(total) > 0.95);
}

namespace {

// A .kvz of `dense`'s rows, head i of the flattened (layer, head) list keeping every (i + 1)-th
// row, stored in `storage`'s dtype and layout (the first 2 positions are prefix rows: f16 rows
// of a q8/q4 file). Returns its path.
std::string write_ragged_file(const model::KvCache& dense, const ModelConfig& cfg,
                              const compress::KvStorage& storage) {
  format::CacheContents c;
  format::CacheHeader& h = c.header;
  h.tool_version = "kvzip test";
  h.model.arch = "llama";
  h.model.name = "test";
  h.n_layers = cfg.n_layers;
  h.n_kv_heads = cfg.n_kv_heads;
  h.head_dim = cfg.head_dim;
  h.kv_dtype = format::DType::F32;
  h.prefix_tokens = {1, 2};
  h.document_tokens.assign(dense.logical_length() - 2, 5);
  h.method = "kvzip";
  const size_t D = cfg.head_dim;
  for (uint32_t l = 0; l < cfg.n_layers; ++l) {
    format::LayerKv lk;
    for (uint32_t hd = 0; hd < cfg.n_kv_heads; ++hd) {
      const model::KvHeadView x = dense.view(l, hd);
      const uint32_t step = 1 + l * cfg.n_kv_heads + hd;
      uint32_t n = 0;
      for (uint32_t r = 0; r < x.len; r += step, ++n) {
        lk.positions.push_back(r);
        lk.k.insert(lk.k.end(), x.k + r * D, x.k + (r + 1) * D);
        lk.v.insert(lk.v.end(), x.v + r * D, x.v + (r + 1) * D);
      }
      lk.head_rows.push_back(n);
    }
    c.layers.push_back(std::move(lk));
  }
  compress::set_kv_dtype(c, storage);
  const auto path =
      (std::filesystem::temp_directory_path() / "kvzip_cuda_forward_quant.kvz").string();
  format::WriteOptions wo;
  wo.force = true;
  format::write_cache_file(c, path, wo);
  return path;
}

}  // namespace

TEST_CASE(
    "gpu forward over a q8/q4 file kept as stored decodes like the CPU and like its dequantized "
    "rows",
    "[cuda]") {
  if (!gpu_ready()) return;
  const model::Weights w = bf16_weights(test::random_weights(gpu_test_config(), test::seed(12)));
  model::Forward cpu(w, model::ForwardOptions{});
  model::GpuForward gpu(w);
  model::KvCache dense(w.config, 300);
  cpu.prefill(dense, tokens(300, 6), model::LogitsMode::None);
  for (const format::DType dtype : {format::DType::Q4, format::DType::Q8}) {
    compress::KvStorage storage;
    storage.dtype = dtype;
    const std::string path = write_ragged_file(dense, w.config, storage);
    const format::CacheReader reader = format::CacheReader::open(path);
    INFO(format::dtype_name(dtype));
    model::GpuCache kept = loader::gpu_cache_from_reader(reader, 16);  // the rows as stored
    model::GpuCache wide = loader::gpu_cache_from_reader(reader, 16, nullptr, loader::KvForm::F32);
    REQUIRE(kept.quantized());
    REQUIRE_FALSE(wide.quantized());
    CHECK(kept.bytes_used() * 3 < wide.bytes_used());  // q8 about 1/4, q4 about 1/7 of f32 rows
    const model::QuantBase qb = loader::quant_base_from_reader(reader);
    model::BranchCache host(qb, 16);
    // A 9-token question (27 query rows a KV head: split-K directly) and a 50-token one (150
    // rows: two blocks), then decode steps; each from the compressed state.
    for (size_t n : {size_t(9), size_t(50)}) {
      const auto question = tokens(n, 7);
      const auto a = cpu.prefill(host, question, model::LogitsMode::Last);
      const auto b = gpu.prefill(kept, question, model::LogitsMode::Last);
      const auto c = gpu.prefill(wide, question, model::LogitsMode::Last);
      CHECK(test::rel_error(b, a) < 2e-2);
      CHECK(same_pick(a, b));
      CHECK(test::rel_error(b, c) < 2e-2);
      for (int step = 0; step < 3; ++step) {
        const auto la = cpu.decode(host, 3 + step), lb = gpu.decode(kept, 3 + step);
        CHECK(test::rel_error(lb, la) < 2e-2);
        CHECK(same_pick(la, lb));
      }
      host.rollback(300);
      kept.reset();
      wide.reset();
      CHECK(kept.logical_length() == 300);
    }
    // Its quantized rows are base rows: rolling back below the base is refused.
    CHECK_THROWS_AS(kept.rollback(299), Error);
    CHECK(kept.logical_length() == 300);
    // An observer would see only the f32 rows of such a cache: refused.
    struct Nothing final : model::GpuAttentionObserver {
      void on_attention(const model::GpuAttentionObservation&) override {}
    } nothing;
    const auto q1 = tokens(1, 8);
    CHECK_THROWS_AS(gpu.prefill(kept, q1, model::LogitsMode::Last, &nothing), Error);
    std::filesystem::remove(path);
  }
}

#else

TEST_CASE("gpu forward tests are skipped in a CPU-only build", "[cuda]") {
  CHECK_FALSE(kvzip::test::gpu_ready());
}

#endif
