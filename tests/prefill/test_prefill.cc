// prefill_document: the same cache as one plain forward over [prefix ; document], progress reported
// per chunk up to the total, the context check stating both numbers; the progress bar's terminal
// and plain-line modes and its quiet flag.
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "common/error.h"
#include "prefill/prefill.h"
#include "tests/compress/support.h"
#include "tests/support/random_weights.h"

using namespace kvzip;

namespace {

std::string read_all(FILE* f) {
  std::string s;
  std::rewind(f);
  char buf[512];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}

size_t count(const std::string& s, char c) { return size_t(std::count(s.begin(), s.end(), c)); }

}  // namespace

TEST_CASE("prefill_document fills the cache like one forward over prefix and document",
          "[prefill]") {
  const ModelConfig cfg = test::tiny_llama_config();
  const Weights w = test::random_weights(cfg, 80);
  auto prefix = test::random_tokens(5, cfg.vocab_size, 81);
  auto doc = test::random_tokens(23, cfg.vocab_size, 82);
  Forward fwd(w, ForwardOptions{2, 512, {}});

  std::vector<PrefillProgress> seen;
  PrefillOptions po;
  po.chunk = 7;  // chunks straddle the prefix/document boundary
  po.answer_room = 10;
  po.progress = [&](const PrefillProgress& p) { seen.push_back(p); };
  PrefillResult r = prefill_document(fwd, prefix, doc, po);
  CHECK(r.n_prefix == 5);
  CHECK(r.n_doc == 23);
  CHECK(r.cache.logical_length() == 28);
  CHECK(r.cache.capacity() >= 38);  // room for the answer without re-growing
  CHECK(r.seconds > 0);

  REQUIRE(seen.size() == 1 + 4);  // 0, 7, 14, 21, 28
  for (size_t i = 0; i < seen.size(); ++i) {
    CHECK(seen[i].done == std::min<uint64_t>(28, 7 * i));
    CHECK(seen[i].total == 28);
  }
  CHECK(seen.back().tokens_per_s > 0);

  std::vector<int32_t> all = prefix;
  all.insert(all.end(), doc.begin(), doc.end());
  KvCache plain(cfg);
  fwd.prefill(plain, all, LogitsMode::None);
  for (uint32_t l = 0; l < cfg.n_layers; ++l)
    for (uint32_t h = 0; h < cfg.n_kv_heads; ++h) {
      const KvHeadView a = r.cache.view(l, h), b = plain.view(l, h);
      REQUIRE(a.len == 28);
      CHECK(test::rel_error(a.k, b.k, size_t(28) * cfg.head_dim) < 1e-5);
      CHECK(test::rel_error(a.v, b.v, size_t(28) * cfg.head_dim) < 1e-5);
    }
}

TEST_CASE("a sequence longer than the model's context is refused with both numbers",
          "[prefill]") {
  ModelConfig cfg = test::tiny_llama_config();
  cfg.max_context = 100;
  try {
    check_fits_context(cfg, 10, 80, 20);
    FAIL("no error");
  } catch (const Error& e) {
    const std::string m = e.what();
    INFO(m);
    CHECK(e.code() == Errc::invalid_argument);
    CHECK(m.find("80 document tokens + 10 prefix tokens + 20 tokens") != std::string::npos);
    CHECK(m.find("110 tokens") != std::string::npos);
    CHECK(m.find("max context is 100") != std::string::npos);
  }
  CHECK_NOTHROW(check_fits_context(cfg, 10, 70, 20));  // exactly full
  CHECK_THROWS_AS(check_fits_context(cfg, 10, 0, 20), Error);  // empty document
  cfg.max_context = 0;                                          // unknown: no limit
  CHECK_NOTHROW(check_fits_context(cfg, 10, 100000, 20));
}

TEST_CASE("the progress bar writes at most four plain lines when not on a terminal",
          "[prefill]") {
  FILE* f = std::tmpfile();
  REQUIRE(f);
  {
    ProgressBarOptions o;
    o.out = f;
    o.tty = 0;
    ProgressBar bar(o);
    for (uint64_t done = 0; done <= 1000; done += 10) bar.update(PrefillProgress{done, 1000, 1.0, 10.0 * done});
  }
  const std::string s = read_all(f);
  INFO(s);
  CHECK(count(s, '\n') == 4);
  CHECK(count(s, '\r') == 0);
  CHECK(s.find("100%  1000/1000 tok  10000 tok/s") != std::string::npos);
  std::fclose(f);
}

TEST_CASE("the progress bar redraws one line on a terminal and is silent when quiet",
          "[prefill]") {
  FILE* f = std::tmpfile();
  REQUIRE(f);
  {
    ProgressBarOptions o;
    o.out = f;
    o.tty = 1;
    o.redraw_s = 0.0;
    o.label = "doc";
    ProgressBar bar(o);
    CHECK(bar.is_tty());
    bar.update(PrefillProgress{5, 10, 0.5, 10});
    bar.update(PrefillProgress{10, 10, 1.0, 10});
  }
  std::string s = read_all(f);
  CHECK(count(s, '\r') == 2);
  CHECK(count(s, '\n') == 1);  // finish() ends the line once
  CHECK(s.find("doc [###############...............]  50%") != std::string::npos);
  std::fclose(f);

  f = std::tmpfile();
  {
    ProgressBarOptions o;
    o.out = f;
    o.quiet = true;
    ProgressBar bar(o);
    bar.update(PrefillProgress{10, 10, 1.0, 10});
  }
  CHECK(read_all(f).empty());
  std::fclose(f);
}
