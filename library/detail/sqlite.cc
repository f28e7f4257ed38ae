// The SQLite wrapper of library/detail/sqlite.h: connection and statement lifetimes, binds,
// columns, and SQLite result codes mapped to kvzip's error codes.
#include "library/detail/sqlite.h"

#include <sqlite3.h>

#include "common/error.h"

namespace kvzip::library::detail {

void fail(sqlite3* db, int rc, const std::string& what) {
  const int primary = rc & 0xff;
  const std::string msg = what + ": " + (db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  // A damaged file or one that is not a database: the index is rebuilt from the caches.
  if (primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB) throw Error(Errc::corrupt, msg);
  throw Error(Errc::io, msg);
}

Db::Db(const std::string& path, int flags) {
  const int rc = sqlite3_open_v2(path.c_str(), &db_, flags | SQLITE_OPEN_URI, nullptr);
  if (rc != SQLITE_OK) {
    const std::string msg =
        "index " + path + ": " + (db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc));
    sqlite3_close(db_);
    db_ = nullptr;
    const int primary = rc & 0xff;
    throw Error(primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB ? Errc::corrupt : Errc::io,
                msg);
  }
  sqlite3_extended_result_codes(db_, 1);
}

Db::~Db() { sqlite3_close(db_); }

void Db::exec(const std::string& sql) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
  sqlite3_free(err);
  if (rc != SQLITE_OK) fail(db_, rc, "index");
}

int64_t Db::changes() const { return sqlite3_changes64(db_); }

Stmt::Stmt(const Db& db, const std::string& sql) : db_(db.raw()) {
  const int rc = sqlite3_prepare_v2(db_, sql.c_str(), static_cast<int>(sql.size()), &st_, nullptr);
  if (rc != SQLITE_OK) fail(db_, rc, "index");
}

Stmt::~Stmt() { sqlite3_finalize(st_); }

Stmt& Stmt::bind(int i, int64_t v) {
  const int rc = sqlite3_bind_int64(st_, i, v);
  if (rc != SQLITE_OK) fail(db_, rc, "index");
  return *this;
}

Stmt& Stmt::bind(int i, double v) {
  const int rc = sqlite3_bind_double(st_, i, v);
  if (rc != SQLITE_OK) fail(db_, rc, "index");
  return *this;
}

Stmt& Stmt::bind(int i, std::string_view v) {
  const int rc = sqlite3_bind_text64(st_, i, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  if (rc != SQLITE_OK) fail(db_, rc, "index");
  return *this;
}

bool Stmt::step() {
  const int rc = sqlite3_step(st_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  fail(db_, rc, "index");
}

void Stmt::reset() {
  sqlite3_reset(st_);
  sqlite3_clear_bindings(st_);
}

int64_t Stmt::int64(int col) const { return sqlite3_column_int64(st_, col); }
double Stmt::real(int col) const { return sqlite3_column_double(st_, col); }
std::string Stmt::text(int col) const {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(st_, col));
  return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(st_, col))) : std::string();
}

}  // namespace kvzip::library::detail
