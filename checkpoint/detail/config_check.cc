// check_config_shape (see config_check.h).
#include "checkpoint/detail/config_check.h"

namespace kvzip::model::detail {

void check_config_shape(const ModelConfig& c, const ConfigNames& names,
                        const std::function<void(const std::string&)>& bad) {
  const uint32_t dims[7] = {c.n_layers, c.d_model, c.n_heads,   c.n_kv_heads,
                            c.head_dim, c.d_ffn,   c.vocab_size};
  for (uint32_t d : dims)
    if (d == 0) {
      std::string list;
      for (int i = 0; i < 7; ++i) {
        if (i) list += ' ';
        list.append(names.dims[i]).append("=").append(std::to_string(dims[i]));
      }
      bad("model dimensions must be non-zero (" + list + ")");
    }
  if (c.n_heads % c.n_kv_heads != 0)
    bad(std::string(names.n_heads) + " " + std::to_string(c.n_heads) + " is not a multiple of " +
        names.n_kv_heads + " " + std::to_string(c.n_kv_heads));
  if (c.head_dim % 2 != 0)
    bad(std::string(names.head_dim) + " " + std::to_string(c.head_dim) + " is odd");
}

}  // namespace kvzip::model::detail
