// The kvzip::Error a call throws, for tests that check an error's code and message:
//   const Error e = test::error_from([&] { parse_device("gpu"); }, "accepted 'gpu'");
//   CHECK(e.code() == Errc::invalid_argument);
// error_from FAILs the test case (with `if_none`) when the call returns; thrown() returns nullopt
// instead, for predicates. Any other exception propagates and fails the test case.
#pragma once
#include <catch2/catch.hpp>

#include <optional>
#include <string>

#include "common/error.h"

namespace kvzip::test {

template <class Call>
std::optional<Error> thrown(Call&& call) {
  try {
    call();
  } catch (const Error& e) {
    return e;
  }
  return std::nullopt;
}

// Whether the call throws an Error with this code.
template <class Call>
bool throws_code(Call&& call, Errc code) {
  const std::optional<Error> e = thrown(call);
  return e && e->code() == code;
}

template <class Call>
Error error_from(Call&& call, const std::string& if_none = "no error") {
  std::optional<Error> e = thrown(call);
  if (!e) FAIL(if_none);
  return *e;
}

}  // namespace kvzip::test
