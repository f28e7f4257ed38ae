// User text with the checks every command applies (see text_file.h).
#include "common/text_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "common/error.h"
#include "common/utf8.h"

namespace kvzip {

void check_text(const std::string& text, const std::string& what) {
  if (!is_valid_utf8(text)) {
    const size_t at = utf8_valid_run(text, 0);  // the first byte of the first bad sequence
    throw Error(Errc::invalid_argument,
                what + " is not valid UTF-8 (first bad byte at offset " + std::to_string(at) + ")" +
                    "; convert it to UTF-8 first (e.g. iconv -f LATIN1 -t UTF-8)");
  }
  if (const size_t nul = text.find('\0'); nul != std::string::npos)
    throw Error(Errc::invalid_argument, what + " contains a NUL byte at offset " +
                                            std::to_string(nul) + "; it is not a text file");
  if (text.find_first_not_of(" \t\r\n\f\v") == std::string::npos)
    throw Error(Errc::invalid_argument, what + " is empty; give a non-empty UTF-8 text");
}

std::string read_text(const std::string& path, const std::string& what) {
  std::string text;
  std::error_code ec;
  if (path != "-" &&
      std::filesystem::is_directory(path, ec))  // an ifstream opens it, reads nothing
    throw Error(
        Errc::invalid_argument,
        what + " " + path + " is a directory; give a UTF-8 text file ('-' reads standard input)");
  if (path == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      const int err = errno;
      throw Error(err == ENOENT ? Errc::not_found : Errc::io,
                  "cannot open " + what + " " + path + ": " + std::strerror(err));
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  check_text(text, what + " " + (path == "-" ? std::string("(stdin)") : path));
  return text;
}

}  // namespace kvzip
