// Enum names kept in one table per enum and read both ways: the name of a value (messages, files,
// summaries) and the value of a name (option parsing), plus the list of names for error messages.
// Tables are a handful of entries, so a linear scan is all a lookup takes.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace kvzip {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

// The name of v, or `unknown` when the table has no entry for it (a value cast from a number).
template <class E, size_t N>
constexpr const char* enum_name(const EnumName<E> (&table)[N], E v,
                                const char* unknown = "unknown") {
  for (const EnumName<E>& e : table)
    if (e.value == v) return e.name;
  return unknown;
}

// The value named `name`, or nullopt.
template <class E, size_t N>
constexpr std::optional<E> enum_value(const EnumName<E> (&table)[N], std::string_view name) {
  for (const EnumName<E>& e : table)
    if (name == e.name) return e.value;
  return std::nullopt;
}

// "a, b, c": every name in table order.
template <class E, size_t N>
std::string enum_names(const EnumName<E> (&table)[N]) {
  std::string s;
  for (const EnumName<E>& e : table) s += (s.empty() ? "" : ", ") + std::string(e.name);
  return s;
}

}  // namespace kvzip
