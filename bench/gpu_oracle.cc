// gpu_oracle: kvzip's logits for given token ids on the CPU and on the CUDA path, as raw float32,
// for an outside oracle to compare (scripts/golden/tiny_llama_oracle.py runs PyTorch/transformers
// on the same model on the device). The ids go in as the GPU path meets them in a query session:
// a long prefill, a short block (the split-K attention path), then single-token decodes; every
// position's logits are kept, so the rows equal one causal forward over all ids.
// Usage: gpu_oracle MODEL.gguf OUT_DIR ID ID ... (at least 40 ids). Writes OUT_DIR/kvzip_cpu.f32
// and, with a CUDA device, OUT_DIR/kvzip_cuda.f32 (rows = ids, row length = vocab size).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "cache/gpu_cache.h"
#include "common/error.h"
#include "kernels/device.h"
#include "model/forward.h"
#include "model/gpu_forward.h"
#include "model/model.h"

using namespace kvzip;

namespace {

constexpr size_t kBlock = 20, kDecodes = 4;  // the short block and the decodes after the prefill

void write_f32(const std::string& path, const std::vector<float>& x) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(x.data()), std::streamsize(x.size() * sizeof(float)));
  if (!out) throw Error(Errc::io, "cannot write " + path);
}

// Prefill, short block, decodes: the logits of every position, in order.
template <class Fwd, class Cache>
std::vector<float> run(Fwd& f, Cache& cache, std::span<const int32_t> ids) {
  const size_t first = ids.size() - kBlock - kDecodes;
  std::vector<float> all = f.prefill(cache, ids.subspan(0, first), model::LogitsMode::All);
  const std::vector<float> block =
      f.prefill(cache, ids.subspan(first, kBlock), model::LogitsMode::All);
  all.insert(all.end(), block.begin(), block.end());
  for (size_t i = first + kBlock; i < ids.size(); ++i) {
    const std::vector<float> one = f.decode(cache, ids[i]);
    all.insert(all.end(), one.begin(), one.end());
  }
  return all;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 + 40) {
    std::fprintf(stderr, "usage: gpu_oracle MODEL.gguf OUT_DIR ID ID ... (at least 40 ids)\n");
    return 2;
  }
  try {
    const std::string out_dir = argv[2];
    std::vector<int32_t> ids;
    for (int i = 3; i < argc; ++i) ids.push_back(std::atoi(argv[i]));
    auto model = model::Model::load(argv[1]);
    const uint32_t T = uint32_t(ids.size());
    model::Forward cpu(model->weights(), model::ForwardOptions{});
    model::KvCache cc(model->config(), T);
    write_f32(out_dir + "/kvzip_cpu.f32", run(cpu, cc, ids));
    std::printf("gpu_oracle: %u ids, vocab %u: cpu logits written\n", T,
                model->config().vocab_size);
    if (!kernels::kBuiltWithCuda || kernels::cuda_device_count() == 0) {
      std::printf("gpu_oracle: cuda skipped (%s)\n",
                  kernels::kBuiltWithCuda ? "no device" : "CPU-only build");
      return 0;
    }
    model::GpuForward gpu(model->weights());
    model::GpuCache gc(model::cache_shape(model->config()),
                       16);  // small room: the cache grows on the way
    write_f32(out_dir + "/kvzip_cuda.f32", run(gpu, gc, ids));
    std::printf("gpu_oracle: cuda logits written\n");
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "gpu_oracle: %s (%s)\n", e.what(), errc_name(e.code()));
    return exit_status(e.code());
  }
}
