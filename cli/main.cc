// The `kvzip` command: parses arguments, calls the modules, maps kvzip::Error codes to exit
// statuses (common/error.h, README "Exit statuses"); option-parser errors take the same
// `kvzip: error [invalid_argument]: ...` form and status 2. SIGINT/SIGTERM/SIGHUP remove any
// temporary output file first (common/atomic_file.h). Thin by design: no logic lives here.
#include <cstdio>
#include <exception>
#include <string>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "common/atomic_file.h"
#include "common/error.h"

namespace {

// What the user typed wrong, in words: CLI11's "Could not convert: --ratio = abc" becomes
// "--ratio abc is not a number", naming the subcommand whose --help lists the options.
std::string parse_error_text(const CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  std::string where = "kvzip";
  const CLI::App* sub = nullptr;
  for (const CLI::App* s : app.get_subcommands()) where += " " + s->get_name(), sub = s;
  std::string what = e.what();
  if (!sub && argc > 1 && argv[1][0] != '-') {  // CLI11 only says a subcommand is required
    std::string known;
    for (const CLI::App* s : app.get_subcommands({}))
      known += (known.empty() ? "" : ", ") + s->get_name();
    return std::string("unknown command '") + argv[1] + "'; commands: " + known +
           "; see `kvzip --help`";
  }
  const std::string conv = "Could not convert: ";
  if (what.rfind(conv, 0) == 0 && what.find(" = ") != std::string::npos) {
    const std::string name = what.substr(conv.size(), what.find(" = ") - conv.size());
    const std::string value = what.substr(what.find(" = ") + 3);
    std::string kind = "a valid value";
    if (sub) {
      try {
        const std::string type = sub->get_option(name)->get_type_name();
        kind = type == "UINT"    ? "a whole number (0 or more)"
               : type == "INT"   ? "a whole number"
               : type == "FLOAT" ? "a number"
                                 : "a valid " + type;
      } catch (const CLI::Error&) {  // not found under that name: keep the generic word
      }
    }
    what = name + " " + value + " is not " + kind;
  }
  return what + "; see `" + where + " --help`";
}

}  // namespace

int main(int argc, char** argv) {
  kvzip::install_signal_cleanup();
  CLI::App app{"kvzip: offline KV-cache compression for long-document question answering"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("kvzip ") + KVZIP_VERSION);
  kvzip::cli::add_model_commands(app);
  kvzip::cli::add_query_commands(app);
  kvzip::cli::add_compress_commands(app);
  kvzip::cli::add_calibrate_commands(app);
  kvzip::cli::add_format_commands(app);
  kvzip::cli::add_eval_commands(app);
  kvzip::cli::add_serve_commands(app);
  kvzip::cli::add_library_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::fprintf(stderr, "kvzip: error [invalid_argument]: %s\n",
                 parse_error_text(app, e, argc, argv).c_str());
    return kvzip::exit_status(kvzip::Errc::invalid_argument);
  } catch (const kvzip::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "kvzip: error [%s]: %s\n", kvzip::errc_name(e.code()),
                 kvzip::cli::with_flag_names(e.what()).c_str());
    return kvzip::exit_status(e.code());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "kvzip: error [out_of_memory]: out of memory\n");
    return kvzip::exit_status(kvzip::Errc::out_of_memory);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvzip: error [internal]: %s\n", e.what());
    return kvzip::exit_status(kvzip::Errc::internal);
  }
  return 0;
}
