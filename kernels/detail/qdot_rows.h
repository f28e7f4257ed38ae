// Private to kernels/cpu/qdot*.cc: the per-ISA row kernels of the 8-bit-activation product
// (kernels/qdot.h) and the block facts every ISA shares — byte layout, the fp32 scale/min of each
// 32-element group, and the group's integer weights in element order (the scalar reference's
// decoder; the AVX2 one decodes the same integers in registers). Layouts as in quant.cc's
// dequantizers: the products here equal dequantized fp32 weights times the int8 activations.
#pragma once
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/detail/dequant_x86.h"
#include "kernels/qdot.h"

namespace kvzip::kernels::cpu::detail {

struct QDotRowsArgs {
  const MatrixView* w = nullptr;  // (out, in)
  const Q8Act* x = nullptr;       // (T, in / 32)
  uint32_t T = 0;
  float* y = nullptr;       // (T, out), canonical row order
  uint32_t r0 = 0, r1 = 0;  // canonical rows to compute
};

using QDotFn = void (*)(const QDotRowsArgs& a);
QDotFn qdot_rows_scalar(quant::GgmlType t);  // nullptr for a type qdot does not read
QDotFn qdot_rows_avx2(quant::GgmlType t);    // nullptr also when the build has no AVX2 variant
QDotFn qdot_rows_vnni(quant::GgmlType t);    // the same tiles with vpdpbusd: bit-identical results
// qdot_rows_vnni without the sixteen-row decode kernels: at T = 1 the eight-row ones (the same
// bits; kernels/detail/decode_pick.h says when each runs).
QDotFn qdot_rows_vnni8(quant::GgmlType t);
// Which decode kernels a one-token call on a VNNI CPU runs: 0 = timed choice (DecodePick), 16 =
// always the 512-bit ones (qdot_rows_vnni: sixteen-row or eight-row two-block tiles), 8 = always
// the 256-bit eight-row ones. Starts from $KVZIP_DECODE_ROWS (auto, 16 or 8; docs/cpu-kernels.md).
void set_decode_rows(int rows);
int decode_rows();

// Activations of T tokens for the GEMMs (AVX2: qdot_x86.cc, AVX-512 VNNI: qdot_avx512.cc, AMX:
// qdot_amx.cc), in vectors of 16 tokens (lane l of vector v is token 16v + l; lanes past T are
// zero activations; the AVX2 GEMM reads a vector as two 8-token halves, bytes 0-31 and 32-63):
//   u (nv, in / 4, 16, 4) bytes: q + 128 (unsigned, so the weights are vpdpbusd's signed side),
//     or q itself for AVX2 and AMX (vpmaddubsw and tdpbssd take signed activations)
//   d (nv, in / 32, 16) floats: each 32-block's scale; s (nv, in / 32, 16): its d·Σq
struct QActPack {
  std::vector<uint8_t> u;
  std::vector<float> d, s;
  uint32_t nv = 0, in = 0;
};
struct PackOpts {
  bool offset128 = true;  // u = q + 128 (VNNI) or q (AVX2, AMX)
};
inline constexpr PackOpts kSignedPack{false};
// pack_acts_vnni on a VNNI CPU (AVX-512 gathers), else pack_acts_portable: the same bytes.
void pack_acts(const Q8Act* x, uint32_t T, uint32_t in, QActPack& out, PackOpts o = {});
void pack_acts_portable(const Q8Act* x, uint32_t T, uint32_t in, QActPack& out, PackOpts o = {});
void pack_acts_vnni(const Q8Act* x, uint32_t T, uint32_t in, QActPack& out, PackOpts o = {});
// quantize_acts (kernels/qdot.h) over nblocks consecutive 32-element blocks in AVX-512: the same
// bytes as the portable quantizer (tested), which it stands in for on VNNI CPUs.
void quantize_acts_vnni(const float* x, size_t nblocks, Q8Act* out);
void quantize_acts_avx2(const float* x, size_t nblocks,
                        Q8Act* out);  // the same in AVX2 (qdot_x86.cc)
// Rows [a.r0, a.r1) for every token of `x` (a.x is not read); the same integer sums as the
// scalar kernel, fp32 accumulation per group in group order.
using QGemmFn = void (*)(const QDotRowsArgs& a, const QActPack& x);
QGemmFn qdot_gemm_vnni(quant::GgmlType t);  // nullptr when the build has no AVX-512 VNNI variant
// The AVX2 GEMM (qdot_x86.cc, vpmaddubsw + vpmaddwd on a kSignedPack pack): nullptr when the build
// has no AVX2 variant.
QGemmFn qdot_gemm_avx2(quant::GgmlType t);
bool cpu_has_avx512_vnni();  // AVX-512 F, BW, VL and VNNI, plus the AVX2 set
// The AVX-512 VNNI decode kernels in sixteen-row tiles (qdot_decode_avx512.cc), any T (qdot
// uses them below kQdotDecode16GemmMinT, or Q6_K's and Q8_0's; eight tokens a pass over a tile):
// rows [a.r0, a.r0 + 16·n) for the most whole tiles n; returns the first row left to the tiles'
// kernels. nullptr for types without one (or a build without the AVX-512 variant).
using QDecodeFn = uint32_t (*)(const QDotRowsArgs& a);
QDecodeFn qdot_decode16_vnni(quant::GgmlType t);
// One token in eight-row tiles, two blocks (Q6_K: a block's two halves) a step (every type with
// a sixteen-row kernel; nullptr for the others): rows
// [a.r0, a.r0 + 8·n), the first row left returned; a.T != 1 or a row map: none done.
QDecodeFn qdot_decode8x2_vnni(quant::GgmlType t);
// The AMX-INT8 GEMM (qdot_amx.cc): a QGemmFn on a pack made with kAmxPack. nullptr when the
// build has no AMX variant.
inline constexpr PackOpts kAmxPack = kSignedPack;
QGemmFn qdot_gemm_amx(quant::GgmlType t);
bool cpu_has_amx_int8();  // AMX-TILE and AMX-INT8, the OS grants the tile state, plus the VNNI set
// The CPU reports AMX-TILE and the unit, and the OS grants this process the tile state.
enum class AmxUnit : uint8_t { Int8, Bf16 };
bool cpu_has_amx(AmxUnit unit);

// The types qdot reads, listed once for every ISA's table: pick(std::integral_constant<GgmlType,
// T>) returns that ISA's kernel for T; nullptr for any other type.
template <class Fn, class Pick>
Fn pick_block_type(quant::GgmlType t, Pick pick) {
  using G = quant::GgmlType;
  switch (t) {
    case G::Q4_0: return pick(std::integral_constant<G, G::Q4_0>{});
    case G::Q4_1: return pick(std::integral_constant<G, G::Q4_1>{});
    case G::Q5_0: return pick(std::integral_constant<G, G::Q5_0>{});
    case G::Q5_1: return pick(std::integral_constant<G, G::Q5_1>{});
    case G::Q8_0: return pick(std::integral_constant<G, G::Q8_0>{});
    case G::Q4_K: return pick(std::integral_constant<G, G::Q4_K>{});
    case G::Q5_K: return pick(std::integral_constant<G, G::Q5_K>{});
    case G::Q6_K: return pick(std::integral_constant<G, G::Q6_K>{});
    default: return nullptr;
  }
}

inline uint32_t rd32le(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// A Q4_K/Q5_K block's eight 6-bit scales (sc) and mins (mn), group g in byte g of each word:
// quant::detail::scale_min_k4 on the 12 bytes at `p` for the eight groups at once, in 32-bit
// integer operations (the AVX2 decode kernels transpose eight rows' words; tested against
// scale_min_k4 on random bytes in tests/kernels/test_qdot.cc).
inline void k4_scale_words(const uint8_t* p, uint64_t& sc, uint64_t& mn) {
  const uint32_t u0 = rd32le(p), u1 = rd32le(p + 4), u2 = rd32le(p + 8);
  const uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4);
  const uint32_t mn_hi = ((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4);
  sc = uint64_t(u0 & 0x3f3f3f3fu) | uint64_t(sc_hi) << 32;
  mn = uint64_t(u1 & 0x3f3f3f3fu) | uint64_t(mn_hi) << 32;
}

// Scale and min of the groups of one block: group g contributes
// (fw[g]·d_x)·Σ_e sub(e)·w_int(e)·q_x(e) + mw[g]·s_x, where sub(e) is sub[g][e / 16] (1 except
// Q6_K).
struct BlockScales {
  float fw[8];
  float mw[8];
  int16_t sub[8][2];
};

// Per type: kBytes per block, kGroups 32-element groups per block, kSigned (integer weights are
// signed: Q8_0, Q6_K's q − 32) and/or a min term (kMin: Q4_1/Q5_1/Q4_K/Q5_K's min, and Q4_0/Q5_0's
// fixed offset −8·d / −16·d, which leaves their nibbles unsigned — vpmaddubsw then needs no sign
// trick, measured 5-12% faster), scales() and the scalar ints().
// `Half` converts the fp16 field at a pointer (portable or F16C; both are exact).
template <quant::GgmlType Ty>
struct QFmt;

// The 32 4-bit values of a Q4_0/Q4_1 block from its 16 nibble bytes (low nibbles first).
inline void nibble_ints(const uint8_t* qs, int (&w)[32]) {
  for (int j = 0; j < 16; ++j) w[j] = qs[j] & 15, w[j + 16] = qs[j] >> 4;
}
// Q5_0/Q5_1: the 32-bit mask of fifth bits at qh, the 16 nibble bytes right after it.
inline void nibble5_ints(const uint8_t* qh_p, int (&w)[32]) {
  const uint32_t qh = rd32le(qh_p);
  const uint8_t* qs = qh_p + 4;
  for (int j = 0; j < 16; ++j) {
    w[j] = int((qs[j] & 15) | ((qh >> j) & 1) << 4);
    w[j + 16] = int((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
  }
}

template <>
struct QFmt<quant::GgmlType::Q4_0> {
  static constexpr int kBytes = 18, kGroups = 1;
  static constexpr bool kSigned = false, kMin = true;
  template <class Half>
  static void scales(const uint8_t* b, Half h, BlockScales& s) {
    s.fw[0] = h(b), s.mw[0] = -8.0f * s.fw[0], s.sub[0][0] = s.sub[0][1] = 1;
  }
  static void ints(const uint8_t* b, int, int (&w)[32]) { nibble_ints(b + 2, w); }
};

template <>
struct QFmt<quant::GgmlType::Q4_1> {
  static constexpr int kBytes = 20, kGroups = 1;
  static constexpr bool kSigned = false, kMin = true;
  template <class Half>
  static void scales(const uint8_t* b, Half h, BlockScales& s) {
    s.fw[0] = h(b), s.mw[0] = h(b + 2), s.sub[0][0] = s.sub[0][1] = 1;
  }
  static void ints(const uint8_t* b, int, int (&w)[32]) { nibble_ints(b + 4, w); }
};

template <>
struct QFmt<quant::GgmlType::Q5_0> {
  static constexpr int kBytes = 22, kGroups = 1;
  static constexpr bool kSigned = false, kMin = true;
  template <class Half>
  static void scales(const uint8_t* b, Half h, BlockScales& s) {
    s.fw[0] = h(b), s.mw[0] = -16.0f * s.fw[0], s.sub[0][0] = s.sub[0][1] = 1;
  }
  static void ints(const uint8_t* b, int, int (&w)[32]) { nibble5_ints(b + 2, w); }
};

template <>
struct QFmt<quant::GgmlType::Q5_1> {
  static constexpr int kBytes = 24, kGroups = 1;
  static constexpr bool kSigned = false, kMin = true;
  template <class Half>
  static void scales(const uint8_t* b, Half h, BlockScales& s) {
    s.fw[0] = h(b), s.mw[0] = h(b + 2), s.sub[0][0] = s.sub[0][1] = 1;
  }
  static void ints(const uint8_t* b, int, int (&w)[32]) { nibble5_ints(b + 4, w); }
};

template <>
struct QFmt<quant::GgmlType::Q8_0> {
  static constexpr int kBytes = 34, kGroups = 1;
  static constexpr bool kSigned = true, kMin = false;
  template <class Half>
  static void scales(const uint8_t* b, Half h, BlockScales& s) {
    s.fw[0] = h(b), s.mw[0] = 0.0f, s.sub[0][0] = s.sub[0][1] = 1;
  }
  static void ints(const uint8_t* b, int, int (&w)[32]) {
    for (int j = 0; j < 32; ++j) w[j] = int8_t(b[2 + j]);
  }
};

// Q4_K / Q5_K: group g = sub-block g; w = d·sc_g·q − dmin·m_g with q unsigned (4 or 5 bits).
template <bool kQ5>
struct QFmtK45 {
  static constexpr int kBytes = kQ5 ? 176 : 144, kGroups = 8;
  static constexpr bool kSigned = false, kMin = true;
  template <class Half>
  static void scales(const uint8_t* b, Half h, BlockScales& s) {
    const float d = h(b), dmin = h(b + 2);
    for (int g = 0; g < 8; ++g) {
      int sc, mn;
      quant::detail::scale_min_k4(g, b + 4, sc, mn);
      s.fw[g] = d * float(sc), s.mw[g] = -(dmin * float(mn)), s.sub[g][0] = s.sub[g][1] = 1;
    }
  }
  static void ints(const uint8_t* b, int g, int (&w)[32]) {
    const uint8_t* qs = b + (kQ5 ? 48 : 16) + 32 * (g / 2);
    for (int l = 0; l < 32; ++l) {
      w[l] = (g & 1) ? qs[l] >> 4 : qs[l] & 15;
      if constexpr (kQ5) w[l] += ((b[16 + l] >> g) & 1) << 4;
    }
  }
};
template <>
struct QFmt<quant::GgmlType::Q4_K> : QFmtK45<false> {};
template <>
struct QFmt<quant::GgmlType::Q5_K> : QFmtK45<true> {};

// Q6_K: group g = (half n = g / 4, quarter k = g % 4): elements 128n + 32k + l, w = q − 32 with
// q's low 4 bits from ql[64n + 32(k & 1) + l] (low nibble for k < 2, high for k >= 2) and its top
// 2 bits from qh[32n + l] bits 2k, 2k+1; sub-scales scales[8n + 2k + l / 16], times d.
template <>
struct QFmt<quant::GgmlType::Q6_K> {
  static constexpr int kBytes = 210, kGroups = 8;
  static constexpr bool kSigned = true, kMin = false;
  template <class Half>
  static void scales(const uint8_t* b, Half h, BlockScales& s) {
    const float d = h(b + 208);
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
    for (int g = 0; g < 8; ++g) {
      const int n = g / 4, k = g % 4;
      s.fw[g] = d, s.mw[g] = 0.0f;
      s.sub[g][0] = sc[8 * n + 2 * k], s.sub[g][1] = sc[8 * n + 2 * k + 1];
    }
  }
  static void ints(const uint8_t* b, int g, int (&w)[32]) {
    const int n = g / 4, k = g % 4;
    const uint8_t* ql = b + 64 * n + 32 * (k & 1);
    const uint8_t* qh = b + 128 + 32 * n;
    for (int l = 0; l < 32; ++l) {
      const int lo = k < 2 ? ql[l] & 15 : ql[l] >> 4;
      w[l] = (lo | ((qh[l] >> (2 * k)) & 3) << 4) - 32;
    }
  }
};

}  // namespace kvzip::kernels::cpu::detail
