// The `kvzip` command: parses arguments, calls the modules, maps kvzip::Error codes to exit
// statuses (common/error.h, README "Exit statuses"). Thin by design: no logic lives here.
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "common/error.h"

int main(int argc, char** argv) {
  CLI::App app{"kvzip: offline KV-cache compression for long-document question answering"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("kvzip ") + KVZIP_VERSION);
  kvzip::cli::add_model_commands(app);
  kvzip::cli::add_query_commands(app);
  kvzip::cli::add_compress_commands(app);
  kvzip::cli::add_calibrate_commands(app);
  kvzip::cli::add_format_commands(app);
  kvzip::cli::add_eval_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  } catch (const kvzip::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "kvzip: error [%s]: %s\n", kvzip::errc_name(e.code()), e.what());
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
