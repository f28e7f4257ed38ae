// A thin RAII layer over the SQLite C API for library/: a connection, prepared statements with
// typed binds and columns, and errors turned into kvzip::Error with SQLite's message. Private to
// library/ (the index is its only user).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

struct sqlite3;
struct sqlite3_stmt;

namespace kvzip::library::detail {

class Db {
 public:
  // Opens (flags as sqlite3_open_v2; a URI filename is accepted). Errc::io when it cannot.
  Db(const std::string& path, int flags);
  ~Db();
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  // Runs one or more statements without results; Errc::corrupt when SQLite reports the file as
  // damaged or not a database, Errc::io otherwise.
  void exec(const std::string& sql);
  int64_t changes() const;
  sqlite3* raw() const { return db_; }

 private:
  sqlite3* db_ = nullptr;
};

class Stmt {
 public:
  Stmt(const Db& db, const std::string& sql);
  ~Stmt();
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Stmt& bind(int i, int64_t v);
  Stmt& bind(int i, double v);
  Stmt& bind(int i, std::string_view v);  // as TEXT (copied)
  // Steps once: true while a row is available, false when done. Errors throw as Db::exec.
  bool step();
  void reset();  // for running again with new binds

  int64_t int64(int col) const;
  double real(int col) const;
  std::string text(int col) const;

 private:
  sqlite3* db_;
  sqlite3_stmt* st_ = nullptr;
};

// Throws the Error that SQLite's result `rc` on `db` stands for; `what` says what was being done.
[[noreturn]] void fail(sqlite3* db, int rc, const std::string& what);

}  // namespace kvzip::library::detail
