// Internal to the CPU attention kernel (kernels/cpu/attention.cc, attention_quant.cc): the f32
// kernel with an optional log-sum-exp output, and the path for spans with quantized rows that
// builds on it. Callers use kernels::attention / cpu::attention (kernels/attention.h).
#pragma once
#include "kernels/attention.h"

namespace kvzip::kernels::cpu::detail {

// cpu::attention over spans without quantized rows (KvSpan::quant must be null). With lse set
// (T, Hq) and a.out set, also writes each query row's log Σ exp(scale·q·k) over the rows it saw.
void attention_f32(ThreadPool* pool, const AttentionArgs& a, float* lse);

// cpu::attention when some span has quantized rows (kernels/attention.h; attention_quant.cc);
// with lse set (T, Hq), also each query row's log-sum-exp over every row it saw.
void attention_quantized(ThreadPool* pool, const AttentionArgs& a, float* lse = nullptr);

// attention_f32 of calls[0, n) (no quantized rows, no parts) in one pass of the pool, each call
// with the plan, and so the result, it gets alone; lse[i] as attention_f32's (null: not wanted).
void attention_f32_many(ThreadPool* pool, const AttentionArgs* calls, float* const* lse, size_t n);

// attention_f32 or attention_quantized, as the spans need (no parts).
void attention_lse(ThreadPool* pool, const AttentionArgs& a, float* lse);

// cpu::attention of a call with parts (AttentionArgs::parts; attention_parts.cc).
void attention_parts(ThreadPool* pool, const AttentionArgs& a);

}  // namespace kvzip::kernels::cpu::detail
