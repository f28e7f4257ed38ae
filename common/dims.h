// The one dimension glossary of kvzip. Every tensor carries a shape comment in these letters.
//   L    layers                      Hq   query heads        Hkv  key/value heads
//   G    query heads per KV head (Hq / Hkv, the GQA group)   D    head dimension
//   T    tokens (sequence positions) E    model width (d_model)   F  FFN width (d_ffn)
//   V    vocabulary size             B    batch
// Row-major everywhere: a shape (A, B) means B is contiguous. Keys are stored post-RoPE in the
// canonical half-split (Hugging Face) head-dim order: RoPE rotates the pairs (i, i + D/2).
#pragma once
