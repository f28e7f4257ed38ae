// kvzip::Error — the one exception type of the library, with a stable code (Errc).
// Library code throws Error on bad input or files; it never exits or aborts. Only cli/ maps
// codes to process exit statuses (exit_status below; documented in the README). Numbers are
// stable: never renumber or reuse a code, leave gaps for new ones.
#pragma once
#include <stdexcept>
#include <string>

namespace kvzip {

enum class Errc : int {
  io = 10,                   // open/read/write/rename failed
  truncated = 11,            // file shorter than its structures say
  bad_magic = 12,            // not a file of the expected kind
  version_unsupported = 13,  // newer major version than this build reads
  corrupt = 14,              // a field holds an impossible value
  checksum_mismatch = 15,    // stored checksum differs from the data
  model_mismatch = 16,       // cache written by another model
  invalid_argument = 20,     // bad user input (ratio, document, option)
  not_found = 21,            // a required file (model, cache) does not exist
  unsupported = 22,          // dtype/arch/device this build cannot handle
  out_of_memory = 30,
  cuda = 31,
  internal = 40,  // a bug in kvzip (programmer error)
};

inline const char* errc_name(Errc c) {
  switch (c) {
    case Errc::io: return "io";
    case Errc::truncated: return "truncated";
    case Errc::bad_magic: return "bad_magic";
    case Errc::version_unsupported: return "version_unsupported";
    case Errc::corrupt: return "corrupt";
    case Errc::checksum_mismatch: return "checksum_mismatch";
    case Errc::model_mismatch: return "model_mismatch";
    case Errc::invalid_argument: return "invalid_argument";
    case Errc::not_found: return "not_found";
    case Errc::unsupported: return "unsupported";
    case Errc::out_of_memory: return "out_of_memory";
    case Errc::cuda: return "cuda";
    case Errc::internal: return "internal";
  }
  return "unknown";
}

// Process exit status the CLI uses for each code (README "Exit statuses").
inline int exit_status(Errc c) {
  switch (c) {
    case Errc::invalid_argument: return 2;
    case Errc::not_found: return 3;
    case Errc::io: return 4;
    case Errc::truncated: return 5;
    case Errc::bad_magic: return 6;
    case Errc::version_unsupported: return 7;
    case Errc::corrupt: return 8;
    case Errc::checksum_mismatch: return 9;
    case Errc::model_mismatch: return 10;
    case Errc::unsupported: return 11;
    case Errc::out_of_memory: return 12;
    case Errc::cuda: return 13;
    case Errc::internal: return 70;
  }
  return 1;
}

class Error : public std::runtime_error {
 public:
  Error(Errc code, const std::string& message) : std::runtime_error(message), code_(code) {}
  Errc code() const noexcept { return code_; }

 private:
  Errc code_;
};

// Programmer-error check (not for user input): throws Errc::internal with the location.
#define KVZIP_ASSERT(cond)                                                                   \
  do {                                                                                       \
    if (!(cond))                                                                             \
      throw ::kvzip::Error(::kvzip::Errc::internal, std::string("internal check failed: ") + \
                                                        #cond + " at " + __FILE__ + ":" +    \
                                                        std::to_string(__LINE__));           \
  } while (0)

}  // namespace kvzip
