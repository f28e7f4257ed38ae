// Causal attention front with GQA, fp32, for prefill (any T) and single-token decode (T == 1).
// Each KV head is a KvSpan of `len` contiguous rows whose LAST T rows are the T new tokens, in
// order; query token i (0-based among the new tokens) attends to rows [0, len - T + i], i.e. to
// every earlier row and to itself. The rule is stated on rows, not positions, so the same kernel
// serves a dense cache and a ragged one (per-head lengths differ; kept rows precede the new ones).
// Query head hq uses KV head hq / G, G = Hq / Hkv. Online softmax over key blocks: no T×len score
// matrix is ever formed; work is split over (KV head, query block, key chunk) tasks.
// A span's rows may lie in two segments (a shared read-only prefix and a private tail, as a
// served request's cache has them, cache/branch_cache.h): the rule above is on the rows of the
// concatenation, and the CPU kernel visits exactly the key blocks it would visit on one
// contiguous copy of those rows, so its result is bit-identical to that copy's.
// A span may also carry quantized rows (KvSpan::quant: a q8/q4 base kept as the file stores it,
// cache/quant_base.h). They come before every f32 row of the span and before the new tokens, so
// every query token sees all of them; the CPU kernel attends to them with the kv_quant kernels
// (kernels/kv_quant.h, no dequantized copy), to the f32 rows as above, and merges the two by their
// log-sum-exp. That equals attention over the dequantized rows up to fp32 summation order.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/device.h"
#include "kernels/kv_quant.h"

namespace kvzip::kernels {

// One KV head's rows as attention reads them: rows [0, len), by default all at k/v. With k_tail
// set, rows [0, split) are at k/v and rows [split, len) at k_tail/v_tail (a second segment).
// With quant set, quant->rows() quantized rows precede all of these (len counts the f32 rows only
// and still includes the T new ones); the rule on the f32 rows is unchanged.
struct KvSpan {
  const float* k = nullptr;               // (len, D) post-RoPE, or (split, D) with a tail
  const float* v = nullptr;               // (len, D), or (split, D) with a tail
  uint32_t len = 0;                       // rows in all, >= T of the call
  const float* k_tail = nullptr;          // (len - split, D) or null: one segment
  const float* v_tail = nullptr;          // (len - split, D)
  uint32_t split = 0;                     // rows in the first segment when k_tail is set
  const KvQuantSegment* quant = nullptr;  // quantized rows before the f32 ones, or null
  // Optional (CPU): the keys of rows [0, kt_rows) already transposed, as transpose_key_tiles
  // writes them, so a call reads them instead of transposing those rows again. kt_rows <= split
  // with a tail (only the read-only first segment can be kept so). Same results as without.
  const float* kt = nullptr;
  uint32_t kt_rows = 0;
  // Visibility beyond the causal rule (composed caches, cache/composed_cache.h). limit (T): token t
  // sees the f32 rows [0, limit[t]) instead (len may then be below T); skip: a bitmap over the f32
  // rows [0, len) whose set bits no token sees. quant_limit and quant_skip say the same of the
  // quantized rows (every token sees all of them by default). Null: no such restriction.
  const uint32_t* limit = nullptr;
  const uint64_t* skip = nullptr;
  const uint32_t* quant_limit = nullptr;
  const uint64_t* quant_skip = nullptr;
  // from (T): token t sees no f32 row below from[t], on top of the rules above: a sliding window
  // by position over rows that are not consecutive positions (a composed cache's local layers).
  // f32 rows only: a span with quantized rows and `from` is refused (check_window).
  const uint32_t* from = nullptr;

  bool two_segments() const { return k_tail != nullptr; }
  bool quantized() const { return quant != nullptr; }
  const float* k_row(uint32_t j, uint32_t D) const {
    return k_tail && j >= split ? k_tail + size_t(j - split) * D : k + size_t(j) * D;
  }
  const float* v_row(uint32_t j, uint32_t D) const {
    return k_tail && j >= split ? v_tail + size_t(j - split) * D : v + size_t(j) * D;
  }
};

// Optional statistics attention computes from the logits it forms anyway (the KVzip score,
// spec/methods.md §1 step 5): for every query row (token i, query head of KV head h), the softmax
// over a LOCAL subset of h's rows — [0, prefix_end) ⊕ [target_begin, target_end) ⊕
// [own_begin, the row's own causal limit] — and, for each target row j, the max of that probability
// over the group's heads and all T tokens, max-combined into out[h·out_stride + j − target_begin]
// (so out must start at 0 or at earlier probabilities). Requires
// prefix_end <= target_begin <= target_end <= own_begin <= len − T in every head. The attention
// output itself is the same (keys are visited local rows first, so it differs from a call without
// stats only by summation order).
struct LocalMaxProb {
  uint32_t prefix_end = 0;
  uint32_t target_begin = 0;
  uint32_t target_end = 0;
  uint32_t own_begin = 0;
  float* out = nullptr;  // (Hkv, out_stride)
  uint64_t out_stride = 0;
};

// Key tiles (KvSpan::kt): the CPU kernel scores keys vectorised across keys, so it reads K
// transposed, kKeyTileRows keys at a time. For a read-only segment that many decode calls attend to
// (a loaded compressed cache) the copy is made once: rows [0, n) of k (n, D) become
// ceil(n / kKeyTileRows) tiles of (D, kKeyTileRows), zero past n, followed by the few floats of
// padding the kernel may read past the last tile. key_tile_floats(n, D) is that buffer's size.
inline constexpr uint32_t kKeyTileRows = 128;
// Floats of padding after the last tile: the widest kernel's key columns per micro-tile.
inline constexpr uint32_t kKeyTilePad = 32;
size_t key_tile_floats(uint32_t n, uint32_t D);

struct AttentionArgs {
  const float* q = nullptr;    // (T, Hq, D), post-RoPE
  const KvSpan* kv = nullptr;  // (Hkv)
  float* out = nullptr;        // (T, Hq, D); must not overlap q or the spans. May be null when
                               // `local` is set: then only the statistics are computed (the
                               // rows outside the local subset are never read). CPU only: the
                               // CUDA twins refuse `local` (check_cuda_attention below)
  uint32_t T = 0;
  uint32_t Hq = 0;
  uint32_t Hkv = 0;
  uint32_t D = 0;
  float scale = 0.0f;                   // multiplies q·k before the softmax; normally 1/sqrt(D)
  const LocalMaxProb* local = nullptr;  // optional statistics (see LocalMaxProb); refused
                                        // (Errc::unsupported) with quantized spans
  // false: every token sees every row of every span (subject to KvSpan::limit/skip), so a span may
  // be shorter than T. The parts below are attended so.
  bool causal = true;
  // Composed caches (cache/composed_cache.h): n_parts read-only blocks of rows per KV head besides
  // the spans, placed at other positions than the ones their keys were rotated for. Part p is
  // attended non-causally with the queries rotated by part_rot[p] (RoPE is a rotation: a query
  // rotated back by a block's shift sees the block's keys at their new relative positions, so the
  // stored rows, quantized or not, are read as they are), and every part's result is merged with
  // the spans' by log-sum-exp. Local statistics are refused with parts.
  const KvSpan* parts = nullptr;    // (n_parts, Hkv)
  const float* part_rot = nullptr;  // (n_parts, 2, D/2): cos, then sin, of each part's query
                                    // rotation (kernels/rope.h pairs); null: no rotation
  uint32_t n_parts = 0;
  // Products on bf16-rounded operands (CPU with AVX-512 BF16, f32 spans in one segment, calls
  // whose keys several query blocks share, i.e. prefill-shaped; elsewhere ignored): q·k and p·v
  // are summed in fp32 by vdpbf16ps from q, k, p and v rounded to nearest even, so each logit and
  // each output element moves by at most about 2^-8 · Σ|a·b| of its own terms (kernels/cpu/
  // attention.cc; measured in tests/kernels/test_attention_bf16.cc). The matmul Fast path asks for
  // it; Exact never does.
  bool bf16 = false;
  // Sliding window (a local layer of a hybrid model): > 0 limits query token i further to rows
  // (len - T + i - window, len - T + i], its last `window` rows, itself included. Rows are the
  // span's rows, so a cache whose local layers keep consecutive positions (cache/kv_cache.h) gets
  // the model's positional window. CPU, f32 spans, no `local` statistics (else Errc::unsupported).
  uint32_t window = 0;
};

// Whether a CPU call asking for AttentionArgs::bf16 gets bf16 products in this process (AVX-512
// BF16, the 16-lane kernel, KVZIP_ATTENTION_BF16 not 0).
bool attention_bf16_available();

// Bit j of a KvSpan::skip bitmap.
inline bool skip_bit(const uint64_t* bits, uint64_t j) { return (bits[j >> 6] >> (j & 63)) & 1u; }

namespace cpu {
void attention(ThreadPool* pool, const AttentionArgs& a);
// Several independent calls (the requests of one batched step, each over its own cache) in one
// pass of the pool instead of one or two passes each; every call keeps the plan it gets alone,
// so each result is bit-identical to attention(pool, call).
void attention_many(ThreadPool* pool, const AttentionArgs* calls, size_t n);
// out (key_tile_floats(n, D)) = the tiles of k (n, D) for KvSpan::kt.
void transpose_key_tiles(const float* k, uint32_t n, uint32_t D, float* out);
}  // namespace cpu

// What the CUDA kernels do not implement, refused before any dispatch (so a CPU-only build refuses
// the same way): spans with two segments (KvSpan::k_tail) throw Errc::unsupported (the served
// engine's shared-base caches are CPU only); `local` statistics (LocalMaxProb) throw
// Errc::unsupported, since the GPU KVzip scorer forms its statistics with attention_score_max
// (kernels/attention_score.h) instead; and with no statistics there is nothing to do without
// `out` (Errc::internal, as for any bad shape). Quantized rows (KvSpan::quant) are accepted: the
// CUDA split-K path attends to them (below).
// Composed caches (AttentionArgs::parts, KvSpan::limit/skip, non-causal calls) are CPU only:
// Errc::unsupported.
void check_cuda_attention(const AttentionArgs& a);
// Refuses (Errc::unsupported) a windowed call the CPU kernel cannot run: quantized rows or
// local statistics together with a window (AttentionArgs::window or KvSpan::from, in the spans
// or the parts).
void check_window(const AttentionArgs& a);

// CUDA twins (kernels/cuda/attention.cu), fp32 in and out, fp32 accumulation, D in {64, 128}.
// q, out and every span's k/v are device memory; `kv` itself is a HOST array of at most
// kMaxKvHeads spans (passed to the kernel by value). Rows must start 16-byte aligned. `out` is
// required and `local` refused (check_cuda_attention, which every entry below runs first).
// Quantized rows: KvSpan::quant is a HOST pointer to a segment whose rows (channel scales,
// parameters, codes) are device memory; all segments of a call share one layout with D = the
// call's head dim. They are attended by the split-K path (attention_decode) only: attention()
// cuts a longer block into blocks of whole tokens for it, attention_prefill refuses them
// (Errc::unsupported). Relative to attention over the dequantized rows only fp32 rounding differs.
inline constexpr uint32_t kMaxKvHeads = 32;
namespace cuda {
// Picks attention_decode when T·G <= kSplitMaxRows, else attention_prefill; with quantized rows
// in any span, attention_decode on blocks of at most kSplitMaxRows / G tokens.
void attention(const AttentionArgs& a, void* stream);
// Flash-style: a block per (32 query tokens, query head) walks 32-key tiles with an online
// softmax; no T×len matrix is formed. Parallelism is ceil(T/32)·Hq blocks, each walking the
// whole cache: right for long prompts, starved for a short block over a long cache.
void attention_prefill(const AttentionArgs& a, void* stream);
// Split along the rows (split-K), for decode and for short query blocks (a question of a few
// dozen tokens) over a long cache: a block per (row split, KV head, group of kDecodeRows query
// rows) serves those rows of the GQA group over one split, so K/V are read once per row group
// and the grid grows with the cache; partial (max, sum, output) are combined by a second kernel.
// Splits are kDecodeSplit rows, widened for very long caches so there are at most
// kMaxSplits of them. Requires T·G <= kSplitMaxRows.
inline constexpr uint32_t kDecodeRows = 16;     // query rows per block
inline constexpr uint32_t kSplitMaxRows = 128;  // T·G the split path takes (8 row groups)
inline constexpr uint32_t kDecodeSplit = 256;   // rows per split (at least)
inline constexpr uint32_t kMaxSplits = 128;
void attention_decode(const AttentionArgs& a, void* stream);
}  // namespace cuda

// Throws Errc::internal when the shapes are inconsistent (Hq not a multiple of Hkv, a span
// shorter than T, null pointers): callers build these arguments, users never do.
inline void attention(const Exec& ex, const AttentionArgs& a) {
  if (ex.device == Device::Cuda) {
    check_cuda_attention(a);
#if KVZIP_HAVE_CUDA
    return cuda::attention(a, ex.stream);
#endif
  }
  require_cpu(ex, "attention");
  cpu::attention(ex.pool, a);
}

// attention() of calls[0, n); no call may write where another reads. The CPU runs them as one
// (cpu::attention_many); the CUDA twins one after another on the stream.
inline void attention_many(const Exec& ex, const AttentionArgs* calls, size_t n) {
  if (ex.device == Device::Cuda) {
    for (size_t i = 0; i < n; ++i) attention(ex, calls[i]);
    return;
  }
  require_cpu(ex, "attention");
  cpu::attention_many(ex.pool, calls, n);
}

}  // namespace kvzip::kernels
