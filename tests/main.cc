// Catch2 entry point for the kvzip test suite. Exit status: Catch's (failed assertions, capped)
// when anything failed; else kSkipExitCode when some test case skipped for lack of the real model
// or a GPU (tests/support/skip.h), so CTest reports the entry as Skipped; else 0.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "tests/support/skip.h"

int main(int argc, char* argv[]) {
  Catch::Session session;
  const int rc = session.run(argc, argv);
  // 77 failed assertions must not read as a skip.
  if (rc != 0) return rc == kvzip::test::kSkipExitCode ? 1 : rc;
  const auto& skipped = kvzip::test::skipped();
  if (skipped.empty()) return 0;
  std::printf("\n%zu test case(s) SKIPPED (exit status %d, which CTest reports as skipped):\n",
              skipped.size(), kvzip::test::kSkipExitCode);
  for (const std::string& s : skipped) std::printf("  %s\n", s.c_str());
  return kvzip::test::kSkipExitCode;
}
