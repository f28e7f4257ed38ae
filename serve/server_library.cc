// The server's library (library/library.h): the index of the served folder, kept current as
// caches are uploaded, replaced and deleted (and refreshed for files written by compress jobs or
// other replicas), GET /v1/search, and the retrieval behind the library model of
// /v1/chat/completions (server_chat.cc).
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "common/error.h"
#include "serve/detail/server_impl.h"

namespace kvzip::serve {

using nlohmann::json;
using namespace detail;

library::Index& Server::Impl::library_locked() {
  const auto now = std::chrono::steady_clock::now();
  if (!library) {
    library::IndexOptions io;
    io.warn = [](const std::string& w) {
      std::fprintf(stderr, "kvzip serve: warning: %s\n", w.c_str());
    };
    io.read_only =
        !library::index_writable(store.dir());  // a read-only folder: its index as it stands
    library = std::make_unique<library::Index>(store.dir(), io);
  } else if (now - library_refreshed < std::chrono::seconds(1)) {
    return *library;
  }
  library_refreshed = now;
  try {
    const library::RefreshStats st = library->refresh();
    library_skipped = st.skipped;
  } catch (const Error& e) {
    if (e.code() != Errc::unsupported) throw;  // read-only: nothing to refresh
  }
  library_caches = library->count();
  return *library;
}

void Server::Impl::library_update(const std::string& id) {
  std::lock_guard<std::mutex> lock(library_mu);
  if (!library) return;  // opened (and refreshed) by the first request that needs it
  try {
    library->update(id);
    library_caches = library->count();
  } catch (const Error& e) {
    // The next refresh catches up; the upload or deletion itself has succeeded.
    std::fprintf(stderr, "kvzip serve: warning: library index not updated for \"%s\": %s\n",
                 id.c_str(), e.what());
  }
}

library::Selection Server::Impl::library_retrieve(const std::string& question,
                                                  uint32_t answer_tokens) {
  std::lock_guard<std::mutex> lock(library_mu);
  library::Index& index = library_locked();
  try {
    return library::retrieve(index, model, question, std::min(opt.library_top_k, opt.max_compose),
                             answer_tokens);
  } catch (const Error& e) {
    throw ApiError(404, "not_found_error", "no_source", e.what(), "messages");
  }
}

void Server::Impl::library_routes() {
  on(Method::Get, "/v1/search",
     [this](const httplib::Request& req, httplib::Response& res, const Scope&) {
       if (!req.has_param("q"))
         throw ApiError(400, "invalid_request_error", "missing_parameter",
                        "q (the question) is required", "q");
       const std::string q = req.get_param_value("q");
       uint32_t k = opt.library_top_k;
       if (req.has_param("k")) {
         const std::string ks = req.get_param_value("k");
         char* end = nullptr;
         const unsigned long v = std::strtoul(ks.c_str(), &end, 10);
         if (ks.empty() || *end || v < 1 || v > 100)
           throw ApiError(400, "invalid_request_error", "invalid_value",
                          "k must be a whole number from 1 to 100", "k");
         k = static_cast<uint32_t>(v);
       }
       std::vector<library::Hit> hits;
       {
         std::lock_guard<std::mutex> lock(library_mu);
         hits = library_locked().search(q, k, &model.fingerprint());
       }
       json data = json::array();
       for (const auto& h : hits)
         data.push_back({{"id", h.id}, {"score", h.score}, {"tokens", h.tokens}});
       send_json(res, 200, {{"object", "list"}, {"query", q}, {"data", data}});
     });
}

}  // namespace kvzip::serve
