// The learned scorer on a hybrid model, the real Gemma 3 270M ([realmodel]; scripts/fetch-model.sh
// gemma3-270m or $KVZIP_GEMMA_MODEL): calibration fits the global layers only (the sliding-window
// layers have no KVzip score to predict, so their fit is NaN), and compressing with the scorer
// keeps every local layer's reachable rows (the prefix and the document's last window - 1, as
// KVzip does) while the global layers keep the ratio's share, the recent window among it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "common/text_file.h"
#include "compress/learned_scorer.h"
#include "compress/pipeline.h"
#include "format/format.h"
#include "tests/format/fixtures.h"
#include "tests/support/skip.h"

using namespace kvzip;

TEST_CASE("kvzap on Gemma 3: global layers scored, local layers keep their window",
          "[compress][realmodel]") {
  KVZIP_GEMMA_MODEL_PATH_OR_SKIP(path);
  const std::string mpl = "/usr/share/common-licenses/MPL-2.0";
  const std::string apache = "/usr/share/common-licenses/Apache-2.0";
  if (!std::filesystem::exists(mpl) || !std::filesystem::exists(apache))
    return test::skip("KVZIP_REQUIRE_GEMMA", "no /usr/share/common-licenses texts");
  const auto model = model::Model::load(path);
  const ModelConfig& c = model->config();
  REQUIRE(c.hybrid());
  format::testing::TempDir dir;

  compress::CalibrateScorerOptions co;
  co.train.window = 400;
  co.train.heldout_every = 3;
  co.threads = 2;
  const std::string kvp = dir.path("gemma.kvp");
  const compress::TrainResult r = compress::calibrate_scorer_file(
      *model, {{mpl, read_text(mpl, "text").substr(0, 6000)}}, kvp, co);
  REQUIRE(r.file.heldout_windows == 1);
  for (const compress::TargetFit& f : r.fits)
    for (uint32_t l = 0; l < c.n_layers; ++l) {
      INFO("layer " << l);
      CHECK(std::isnan(f.r2[l]) == c.is_local(l));
      CHECK(std::isnan(f.spearman[l]) == c.is_local(l));
      if (!c.is_local(l)) CHECK(f.spearman[l] > 0.0f);  // held out: a ranking, not noise
    }

  compress::CompressFileOptions fo;
  fo.compress.method = compress::method_with_scorer("", true);
  fo.compress.ratio = 0.3;
  fo.compress.scorer = compress::make_scorer_options(model->chat(), 2000, 0);
  compress::use_learned_scorer(fo.compress.scorer, compress::load_learned_scorer(kvp), *model);
  fo.threads = 2;
  const std::string doc = read_text(apache, "document").substr(0, 7000);
  const std::string kvz = dir.path("doc.kvz");
  const compress::CompressResult cr = compress::compress_to_file(*model, doc, fo, kvz);
  REQUIRE(cr.n_doc > c.sliding_window + 256);

  const format::CacheReader f = format::CacheReader::open(kvz);
  CHECK(f.header().method == "kvzap");
  CHECK(f.header().achieved_ratio == Approx(0.3).margin(0.01));  // global layers' rows
  const uint32_t n_p = cr.n_prefix, n = cr.n_doc, reach = c.sliding_window - 1;
  uint64_t global_kept = 0, global_heads = 0;
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    INFO("layer " << l);
    const auto rows = f.head_rows(l);
    const auto pos = f.positions(l);
    uint32_t at = 0;
    for (uint32_t h = 0; h < c.n_kv_heads; ++h) {
      const std::vector<uint32_t> kept(pos.begin() + at, pos.begin() + at + rows[h]);
      at += rows[h];
      const auto doc_begin = std::lower_bound(kept.begin(), kept.end(), n_p);
      CHECK(doc_begin - kept.begin() == n_p);  // the prefix, always
      const auto recent_kept = [&](uint32_t w) {
        return uint32_t(kept.end() - std::lower_bound(kept.begin(), kept.end(), n_p + n - w));
      };
      if (c.is_local(l)) {  // exactly the rows a later query can reach
        CHECK(kept.size() == n_p + reach);
        CHECK(recent_kept(reach) == reach);
      } else {  // a share of the ratio's budget, the last 256 rows among it
        CHECK(recent_kept(256) == 256);
        CHECK(kept.size() - n_p < n);
        global_kept += kept.size() - n_p;
        ++global_heads;
      }
    }
  }
  // The budget is the global layers' alone: round(0.3 · L_g · Hkv · n) rows.
  CHECK(global_heads == 3 * c.n_kv_heads);  // Gemma 3 270M: layers 5, 11 and 17
  CHECK(double(global_kept) == Approx(0.3 * double(global_heads) * n).margin(1.0));
}
