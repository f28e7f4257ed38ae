// Skips that CTest reports (Catch2 v2 has no SKIP): a test case that cannot run here for lack of
// the real model or a GPU calls skip_*() and returns; the runner (tests/main.cc) then exits with
// kSkipExitCode, which every CTest entry declares as SKIP_RETURN_CODE, so the entry shows as
// "Skipped" instead of passing silently. A failed assertion anywhere wins: the run fails. Where
// the resource must be there (CI fetches the model, gpu-check runs on a GPU) an environment
// variable (KVZIP_REQUIRE_MODEL / KVZIP_REQUIRE_GPU = 1) turns the skip into a failure.
#pragma once
#include <string>
#include <vector>

namespace kvzip::test {

// 77: the automake convention for "skipped"; never a count of failed assertions (main.cc).
inline constexpr int kSkipExitCode = 77;

// Skips the running test case: WARNs `why`, records it for the runner's summary. If the
// environment variable `require` is set (non-empty, not "0"), FAILs instead. The caller returns.
void skip(const char* require, const std::string& why);
// $KVZIP_MODEL when it names an existing file, else "" (the caller then calls skip_no_model).
std::string real_model_path();
// The standard skip for a [realmodel] test case without $KVZIP_MODEL (KVZIP_REQUIRE_MODEL).
void skip_no_model();
// The standard skip for a [cuda] test case without a CUDA build or device (KVZIP_REQUIRE_GPU).
void skip_no_gpu(const std::string& why);

// The [realmodel] preamble: binds `var` to $KVZIP_MODEL's file, or skips the running test case
// and returns from it when there is none.
#define KVZIP_REAL_MODEL_PATH_OR_SKIP(var)                  \
  const std::string var = ::kvzip::test::real_model_path(); \
  if (var.empty()) return ::kvzip::test::skip_no_model()

// $KVZIP_GEMMA_MODEL, else the path scripts/fetch-model.sh gemma3-270m writes, when it names an
// existing file; else "" (the caller then calls skip_no_gemma).
std::string gemma_model_path();
// The skip for a [realmodel] test case on Gemma 3 270M without its file (KVZIP_REQUIRE_GEMMA = 1
// turns it into a failure, for a run that fetched the model).
void skip_no_gemma();
#define KVZIP_GEMMA_MODEL_PATH_OR_SKIP(var)                  \
  const std::string var = ::kvzip::test::gemma_model_path(); \
  if (var.empty()) return ::kvzip::test::skip_no_gemma()

// $KVZIP_QWEN_MODEL, else the path scripts/fetch-model.sh qwen2.5-0.5b writes, when it names an
// existing file; else "" (the caller then calls skip_no_qwen, which KVZIP_REQUIRE_QWEN = 1 turns
// into a failure).
std::string qwen_model_path();
void skip_no_qwen();
#define KVZIP_QWEN_MODEL_PATH_OR_SKIP(var)                  \
  const std::string var = ::kvzip::test::qwen_model_path(); \
  if (var.empty()) return ::kvzip::test::skip_no_qwen()

// Every skip of this run so far: "test case name: why".
const std::vector<std::string>& skipped();

}  // namespace kvzip::test
