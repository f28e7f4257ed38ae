// Test support: a raw loopback HTTP client and a served tiny model (see http_client.h).
#include "tests/serve/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tests/serve/support.h"

namespace kvzip::test {

using Clock = std::chrono::steady_clock;

int connect_to(int port, const char* source) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  if (source) {
    sockaddr_in s{};
    s.sin_family = AF_INET;
    ::inet_pton(AF_INET, source, &s.sin_addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&s), sizeof s) != 0) {
      ::close(fd);
      return -1;
    }
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool send_all(int fd, const std::string& bytes, std::chrono::milliseconds wait) {
  const auto end = Clock::now() + wait;
  size_t sent = 0;
  while (sent < bytes.size()) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(left)) != 1) return false;
    if (p.revents & (POLLERR | POLLHUP)) return false;
    const ssize_t n =
        ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

namespace {

// True when `text` holds a whole final response.
bool complete(const std::string& text) {
  size_t start = 0;
  while (true) {
    const size_t end = text.find("\r\n\r\n", start);
    if (end == std::string::npos) return false;
    const std::string head = text.substr(start, end - start);
    if (head.rfind("HTTP/1.1 100", 0) == 0) {
      start = end + 4;
      continue;
    }
    std::string lower = head;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const size_t cl = lower.find("content-length:");
    if (cl != std::string::npos)
      return text.size() >= end + 4 + std::strtoull(lower.c_str() + cl + 15, nullptr, 10);
    if (lower.find("chunked") != std::string::npos)
      return text.find("\r\n0\r\n\r\n", end) != std::string::npos;
    return false;
  }
}

}  // namespace

std::string read_response(int fd, std::chrono::milliseconds wait) {
  const auto end = Clock::now() + wait;
  std::string out;
  char buf[65536];
  while (!complete(out)) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) != 1) break;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

int status_of(const std::string& text) {
  size_t pos = 0;
  int status = 0;
  while ((pos = text.find("HTTP/1.1 ", pos)) != std::string::npos) {
    const int s = std::atoi(text.c_str() + pos + 9);
    pos += 9;
    if (s != 100) return s;
    status = s;
  }
  return status == 100 ? 0 : status;
}

std::string http(int port, const std::string& req, std::chrono::milliseconds wait) {
  const int fd = connect_to(port);
  if (fd < 0) return {};
  std::string out;
  if (send_all(fd, req, wait)) out = read_response(fd, wait);
  ::close(fd);
  return out;
}

std::string request(const std::string& method, const std::string& path, const std::string& body,
                    const std::string& extra_headers) {
  std::string r = method + " " + path + " HTTP/1.1\r\nHost: x\r\n" + extra_headers;
  if (!body.empty() || method == "POST" || method == "PUT")
    r +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  return r + "\r\n" + body;
}

double metric(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  return at == std::string::npos ? -1.0 : std::atof(text.c_str() + at + name.size() + 2);
}

uint64_t resident_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
  return 0;
}

ServedModel::ServedModel(const std::string& tag, serve::ServerOptions so, bool access_log)
    : TinyModelDir(tag, 21, 4096) {
  caches = path("caches");
  std::filesystem::create_directories(caches);
  compress_document(*model,
                    "The lighthouse keeper counted ships every night. In winter the harbor froze.",
                    caches + "/doc.kvz");
  std::filesystem::copy_file(caches + "/doc.kvz", caches + "/doc2.kvz");
  so.caches_dir = caches;
  so.port = 0;
  so.access_log = access_log;
  so.engine.threads = 1;
  server = std::make_unique<serve::Server>(*model, so);
  port = server->bind();
  listener = std::thread([this] { server->listen(); });
}

ServedModel::~ServedModel() {
  server->stop(std::chrono::milliseconds(0));
  if (listener.joinable()) listener.join();
  server.reset();
}

}  // namespace kvzip::test
