// The transformer forward pass on a CUDA device (the GPU twin of model/forward.h): weights in
// bf16 (rounded once at load from the fp32 Weights, or random on the device for benchmarks),
// cuBLAS GEMMs with fp32 accumulation and fp32 outputs, and the own kernels of kernels/cuda for
// RMSNorm, RoPE, SwiGLU, attention and the cache append. The residual stream, Q/K/V, the cache
// and every softmax stay fp32; only GEMM inputs are bf16. New tokens continue at
// cache.logical_length(); a failed call rolls the cache back. One call at a time per object; all
// work is enqueued on the object's own stream. In a CPU-only build the constructors throw
// Errc::unsupported. No CUDA header is included from here.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "cache/gpu_cache.h"
#include "checkpoint/weights.h"
#include "model/forward.h"
#include "model/model.h"

namespace kvzip::model {

// What a GPU observer sees for one layer of one chunk (cf. AttentionObservation): q and the
// cache's rows are device memory; query token i attended to rows [0, len - T + i] of every head.
// Not offered over a cache with a quantized base (GpuForward::prefill refuses: Errc::unsupported).
struct GpuAttentionObservation {
  uint32_t layer = 0;
  const float* q = nullptr;  // (T, Hq, D) device, post-RoPE
  uint32_t first_position = 0;
  uint32_t T = 0, Hq = 0, Hkv = 0, D = 0;
  float scale = 0.0f;
  const GpuCache* cache = nullptr;
  void* stream = nullptr;  // the forward's stream: enqueue observer work here
};

class GpuAttentionObserver {
 public:
  virtual ~GpuAttentionObserver() = default;
  virtual void on_attention(const GpuAttentionObservation& obs) = 0;
};

struct GpuForwardOptions {
  uint32_t chunk = 2048;  // tokens per prefill chunk (bounds scratch memory), >= 1
};

class GpuForward {
 public:
  // Uploads `weights` as bf16 (norms and biases stay fp32). Throws Errc::unsupported without a
  // CUDA build or device, or for a head dim the kernels lack (64 and 128 are compiled).
  explicit GpuForward(const Weights& weights, GpuForwardOptions options = {});
  // A synthetic model of config `cfg` with weights drawn on the device (for benchmarks with real
  // shapes: matrices ±1/sqrt(in), norms near 1, embeddings ±1).
  GpuForward(const ModelConfig& cfg, uint64_t seed, GpuForwardOptions options = {});
  ~GpuForward();
  GpuForward(const GpuForward&) = delete;
  GpuForward& operator=(const GpuForward&) = delete;

  // Same contract as Forward::prefill; logits are returned on the host.
  std::vector<float> prefill(GpuCache& cache, std::span<const int32_t> tokens,
                             LogitsMode mode = LogitsMode::Last,
                             GpuAttentionObserver* observer = nullptr);
  std::vector<float> decode(GpuCache& cache, int32_t token);

  const ModelConfig& config() const;
  void* stream();
  void synchronize();
  uint64_t weight_bytes() const;  // device bytes of the weights

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// generate() (model/model.h) on the device: prompt prefill, then one token at a time.
GenerateResult generate(GpuForward& forward, GpuCache& cache, std::span<const int32_t> prompt,
                        const GenerateParams& params, const TokenCallback& on_token = nullptr);

}  // namespace kvzip::model
