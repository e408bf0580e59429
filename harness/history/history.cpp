#include "history/history.h"

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>
#include <thread>

namespace meshtest {

namespace {

// One prepared statement: bind by position from 1, step through rows, finalized on scope exit.
// SQLite answers SQLITE_BUSY at once, without its busy handler, where waiting could deadlock
// or while another connection switches the file to WAL: two runs opening one new database
// meet exactly that. Such an answer is tried again, for up to 30 s like the busy timeout.
template <typename Attempt>
int retrying_busy(Attempt attempt) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int tries = 0;; ++tries) {
    const int rc = attempt();
    if ((rc != SQLITE_BUSY && rc != SQLITE_LOCKED) || std::chrono::steady_clock::now() > deadline) return rc;
    std::this_thread::sleep_for(std::chrono::milliseconds(2 + (tries % 8) * 3));
  }
}

class Statement {
 public:
  Statement(sqlite3* db, const std::string& sql, const std::string& path) : db_(db), path_(path) {
    if (retrying_busy([&] { return sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt_, nullptr); }) != SQLITE_OK)
      fail("preparing " + sql);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& bind(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& bind(int i, double v) {
    std::isfinite(v) ? sqlite3_bind_double(stmt_, i, v) : sqlite3_bind_null(stmt_, i);
    return *this;
  }
  Statement& bind(int i, long long v) {
    sqlite3_bind_int64(stmt_, i, v);
    return *this;
  }
  Statement& bind(int i, const std::optional<double>& v) { return v ? bind(i, *v) : bind_null(i); }
  Statement& bind_null(int i) {
    sqlite3_bind_null(stmt_, i);
    return *this;
  }
  // True while there is a row to read.
  bool step() {
    // Before its first row a statement can start again; after it, a retry would repeat rows.
    const int rc = rows_ == 0 ? retrying_busy([&] {
      const int r = sqlite3_step(stmt_);
      if (r == SQLITE_BUSY || r == SQLITE_LOCKED) sqlite3_reset(stmt_);
      return r;
    })
                              : sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) {
      ++rows_;
      return true;
    }
    if (rc != SQLITE_DONE) fail("running " + std::string(sqlite3_sql(stmt_)));
    return false;
  }
  void run() {
    while (step()) {
    }
    rows_ = 0;
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  std::string text(int col) const {
    const auto* t = sqlite3_column_text(stmt_, col);
    return t ? reinterpret_cast<const char*>(t) : "";
  }
  double real(int col) const { return sqlite3_column_double(stmt_, col); }
  long long integer(int col) const { return sqlite3_column_int64(stmt_, col); }
  std::optional<double> maybe(int col) const {
    if (sqlite3_column_type(stmt_, col) == SQLITE_NULL) return std::nullopt;
    return real(col);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw HistoryError("history " + path_ + ": " + what + ": " + sqlite3_errmsg(db_));
  }
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int64_t rows_ = 0;  // rows step() returned since the last reset
  std::string path_;
};

// Schema version N is made by kMigrations[N-1] from version N-1 (PRAGMA user_version).
const std::vector<const char*> kMigrations = {
    R"(CREATE TABLE runs(run_id TEXT PRIMARY KEY, commit_sha TEXT, branch TEXT, time REAL, host TEXT,
                         launcher TEXT, matrix_hash TEXT, version TEXT);
       CREATE TABLE cases(run_id TEXT, case_id TEXT, time REAL, status TEXT, met INTEGER, attempts INTEGER,
                          duration_s REAL, final_loss REAL, margin REAL, PRIMARY KEY(run_id, case_id));
       CREATE INDEX cases_by_time ON cases(case_id, time);
       CREATE TABLE phases(run_id TEXT, case_id TEXT, phase TEXT, duration_s REAL, PRIMARY KEY(run_id, case_id, phase));
       CREATE TABLE checks(run_id TEXT, case_id TEXT, idx INTEGER, kind TEXT, phase TEXT, passed INTEGER, margin REAL,
                           step INTEGER, value REAL, reference REAL, PRIMARY KEY(run_id, case_id, idx));
       CREATE TABLE curves(run_id TEXT, case_id TEXT, phase TEXT, metric TEXT, points TEXT,
                           PRIMARY KEY(run_id, case_id, phase, metric));)",
};

// A curve as text: "step value;step value", each value in the fewest digits that read back
// exactly (a logged 6.13977 stays short; a float32's bits take up to 17).
std::string pack(const Curve& c) {
  std::string out;
  char buf[64];
  for (const auto& [step, v] : c) {
    for (int digits = 9; digits <= 17; ++digits) {
      std::snprintf(buf, sizeof buf, "%.*g", digits, v);
      if (std::strtod(buf, nullptr) == v) break;
    }
    out += (out.empty() ? "" : ";") + std::to_string(step) + " " + buf;
  }
  return out;
}

Curve unpack(const std::string& text) {
  Curve c;
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ';')) {
    long long step = 0;
    double v = 0;
    if (std::sscanf(item.c_str(), "%lld %lf", &step, &v) == 2) c.emplace_back(step, v);
  }
  return c;
}

std::optional<double> number(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<double>();
}

// Whether every failed check of summary case `c` is a drift check (and one is).
bool failed_only_by_drift(const nlohmann::json& c) {
  bool drift = false;
  for (const auto& k : c.value("checks", nlohmann::json::array())) {
    if (!k.is_object() || k.value("passed", false)) continue;
    if (k.value("kind", "") != "drift") return false;
    drift = true;
  }
  return drift;
}

}  // namespace

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct History::Db {
  sqlite3* handle = nullptr;
  ~Db() { sqlite3_close(handle); }
};

History::History(const std::string& path) : db_(std::make_unique<Db>()), path_(path) {
  if (sqlite3_open_v2(path.c_str(), &db_->handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK)
    throw HistoryError("history " + path + ": cannot open: " + sqlite3_errmsg(db_->handle));
  sqlite3_busy_timeout(db_->handle, 30000);
  auto exec = [&](const std::string& sql) {
    char* error = nullptr;
    const int rc = retrying_busy([&] {
      sqlite3_free(error);
      error = nullptr;
      return sqlite3_exec(db_->handle, sql.c_str(), nullptr, nullptr, &error);
    });
    if (rc != SQLITE_OK) {
      const std::string why = error ? error : sqlite3_errmsg(db_->handle);
      sqlite3_free(error);
      throw HistoryError("history " + path + ": " + why);
    }
  };
  auto schema_version = [&] {
    Statement version(db_->handle, "PRAGMA user_version", path);
    const int at = version.step() ? static_cast<int>(version.integer(0)) : 0;
    if (at > kSchemaVersion)
      throw HistoryError("history " + path + ": schema version " + std::to_string(at) +
                         " was written by a newer meshtest (this one knows " + std::to_string(kSchemaVersion) + ")");
    return at;
  };
  exec("PRAGMA synchronous=NORMAL;");
  // A database at this schema is only read here: no lock, so a reader (meshtest history) never
  // waits behind a run that is recording (WAL lets readers and one writer go side by side).
  if (schema_version() == kSchemaVersion) return;
  exec("PRAGMA journal_mode=WAL;");
  // Concurrent writers (two runs sharing one new database) migrate one at a time.
  exec("BEGIN IMMEDIATE");
  try {
    const int at = schema_version();
    for (int v = at; v < kSchemaVersion; ++v) exec(kMigrations[static_cast<size_t>(v)]);
    if (at < kSchemaVersion) exec("PRAGMA user_version=" + std::to_string(kSchemaVersion));
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_->handle, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

History::~History() = default;

bool History::record(const nlohmann::json& summary, const RunIdentity& id) {
  sqlite3* db = db_->handle;
  Statement(db, "BEGIN IMMEDIATE", path_).run();
  try {
    Statement seen(db, "SELECT 1 FROM runs WHERE run_id = ?", path_);
    if (seen.bind(1, id.run_id).step()) {
      Statement(db, "ROLLBACK", path_).run();
      return false;
    }
    Statement(db, "INSERT INTO runs VALUES(?,?,?,?,?,?,?,?)", path_)
        .bind(1, id.run_id)
        .bind(2, id.commit)
        .bind(3, id.branch)
        .bind(4, id.time)
        .bind(5, id.host)
        .bind(6, id.launcher)
        .bind(7, id.matrix_hash)
        .bind(8, id.version)
        .run();
    Statement cases(db, "INSERT OR REPLACE INTO cases VALUES(?,?,?,?,?,?,?,?,?)", path_);
    Statement phases(db, "INSERT OR REPLACE INTO phases VALUES(?,?,?,?)", path_);
    Statement checks(db, "INSERT OR REPLACE INTO checks VALUES(?,?,?,?,?,?,?,?,?,?)", path_);
    Statement curves(db, "INSERT OR REPLACE INTO curves VALUES(?,?,?,?,?)", path_);
    const nlohmann::json none = nlohmann::json::array();
    for (const auto& c : summary.value("cases", none)) {
      if (!c.is_object() || !c.contains("id") || !c["id"].is_string()) continue;
      const std::string case_id = c["id"];
      std::optional<double> final_loss, margin;
      for (const auto& p : c.value("phases", none)) {
        if (!p.is_object()) continue;
        const std::string phase = p.value("name", "");
        if (p.value("ran", false))
          phases.bind(1, id.run_id).bind(2, case_id).bind(3, phase).bind(4, number(p, "duration_s")).run();
        Curve loss, grad_norm;
        for (const auto& point : p.value("curve", none)) {
          if (!point.is_array() || point.size() < 3 || !point[0].is_number()) continue;
          if (point[1].is_number()) loss.emplace_back(point[0].get<long long>(), point[1].get<double>());
          if (point[2].is_number()) grad_norm.emplace_back(point[0].get<long long>(), point[2].get<double>());
        }
        if (!loss.empty()) final_loss = loss.back().second;
        for (const auto& [metric, curve] : {std::make_pair("loss", &loss), std::make_pair("grad_norm", &grad_norm)})
          if (!curve->empty())
            curves.bind(1, id.run_id)
                .bind(2, case_id)
                .bind(3, phase)
                .bind(4, std::string(metric))
                .bind(5, pack(*curve))
                .run();
      }
      long long index = 0;
      for (const auto& k : c.value("checks", none)) {
        if (!k.is_object()) continue;
        const auto m = number(k, "margin");
        if (m && k.value("passed", false)) margin = margin ? std::max(*margin, *m) : *m;  // the closest to failing
        checks.bind(1, id.run_id)
            .bind(2, case_id)
            .bind(3, index++)
            .bind(4, k.value("kind", ""))
            .bind(5, k.value("phase", ""))
            .bind(6, static_cast<long long>(k.value("passed", false)))
            .bind(7, m)
            .bind(8, static_cast<long long>(number(k, "step").value_or(-1)))
            .bind(9, number(k, "value"))
            .bind(10, number(k, "reference"))
            .run();
      }
      const auto attempts = static_cast<long long>(1 + c.value("earlier_attempts", none).size());
      // Drift is a verdict about the history: a case failed by its drift check alone is recorded
      // as it passed (docs/history.md), so its band can follow numbers that moved on purpose.
      const bool drift_alone = c.value("status", "") == "failed" && failed_only_by_drift(c);
      cases.bind(1, id.run_id)
          .bind(2, case_id)
          .bind(3, id.time)
          .bind(4, drift_alone ? "passed" : c.value("status", ""))
          .bind(5, static_cast<long long>(drift_alone || c.value("met_expectation", false)))
          .bind(6, attempts)
          .bind(7, number(c, "duration_s"))
          .bind(8, final_loss)
          .bind(9, margin)
          .run();
    }
    Statement(db, "COMMIT", path_).run();
    return true;
  } catch (...) {
    sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

int History::merge_from(const std::string& other) {
  History source(other);  // opens, checks and migrates the other database first
  source.db_.reset();
  sqlite3* db = db_->handle;
  Statement(db, "ATTACH DATABASE ? AS other", path_).bind(1, other).run();
  int added = 0;
  try {
    Statement(db, "BEGIN IMMEDIATE", path_).run();
    Statement count(db, "SELECT count(*) FROM other.runs WHERE run_id NOT IN (SELECT run_id FROM main.runs)", path_);
    added = count.step() ? static_cast<int>(count.integer(0)) : 0;
    const char* tables[] = {"cases", "phases", "checks", "curves"};
    for (const char* t : tables)
      Statement(db,
                std::string("INSERT OR IGNORE INTO main.") + t + " SELECT * FROM other." + t +
                    " WHERE run_id NOT IN (SELECT run_id FROM main.runs)",
                path_)
          .run();
    Statement(db, "INSERT OR IGNORE INTO main.runs SELECT * FROM other.runs", path_).run();
    Statement(db, "COMMIT", path_).run();
  } catch (...) {
    sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    sqlite3_exec(db, "DETACH DATABASE other", nullptr, nullptr, nullptr);
    throw;
  }
  Statement(db, "DETACH DATABASE other", path_).run();
  return added;
}

std::vector<CaseRun> History::case_runs(const std::string& case_id, int limit, bool curves) const {
  Statement q(
      db_->handle,
      "SELECT c.run_id, r.commit_sha, r.branch, r.time, c.status, c.met, c.attempts, c.duration_s, c.final_loss, c.margin "
      "FROM cases c JOIN runs r ON r.run_id = c.run_id WHERE c.case_id = ? ORDER BY c.time DESC, c.run_id DESC LIMIT ?",
      path_);
  q.bind(1, case_id).bind(2, static_cast<long long>(limit));
  std::vector<CaseRun> out;
  while (q.step()) {
    CaseRun r;
    r.run_id = q.text(0), r.commit = q.text(1), r.branch = q.text(2), r.time = q.real(3), r.status = q.text(4);
    r.met = q.integer(5) != 0, r.attempts = static_cast<int>(q.integer(6)), r.duration_s = q.real(7);
    r.final_loss = q.maybe(8), r.margin = q.maybe(9);
    out.push_back(std::move(r));
  }
  if (curves) {
    Statement cq(db_->handle, "SELECT phase, metric, points FROM curves WHERE run_id = ? AND case_id = ?", path_);
    for (auto& r : out) {
      cq.bind(1, r.run_id).bind(2, case_id);
      while (cq.step()) r.curves[cq.text(0) + "/" + cq.text(1)] = unpack(cq.text(2));
      cq.run();
    }
  }
  return out;
}

std::vector<std::string> History::case_ids() const {
  Statement q(db_->handle, "SELECT DISTINCT case_id FROM cases ORDER BY case_id", path_);
  std::vector<std::string> out;
  while (q.step()) out.push_back(q.text(0));
  return out;
}

std::vector<FlakyCase> History::flaky(int window) const {
  std::vector<FlakyCase> out;
  for (const auto& id : case_ids()) {
    auto runs = case_runs(id, window);
    std::reverse(runs.begin(), runs.end());  // oldest first, for "since"
    std::map<std::string, std::set<bool>> met_by_commit;
    for (const auto& r : runs)
      if (r.status != "skipped" && r.status != "cancelled") met_by_commit[r.commit].insert(r.met);
    FlakyCase f;
    f.case_id = id;
    for (const auto& r : runs) {
      if (r.status == "skipped" || r.status == "cancelled") continue;
      ++f.runs;
      const bool mixed = met_by_commit[r.commit].size() > 1;  // the same commit both met and missed
      const bool failed = !r.met && mixed, retried = r.met && r.attempts > 1;
      f.failed += failed, f.retried += retried;
      if ((failed || retried || mixed) && f.since_commit.empty()) f.since_commit = r.commit, f.since_time = r.time;
    }
    if (f.failed + f.retried == 0) continue;
    f.rate = static_cast<double>(f.failed + f.retried) / f.runs;
    out.push_back(f);
  }
  std::stable_sort(out.begin(), out.end(), [](const FlakyCase& a, const FlakyCase& b) { return a.rate > b.rate; });
  return out;
}

std::vector<SlowCase> History::slowest(int window, int limit) const {
  std::vector<SlowCase> out;
  for (const auto& id : case_ids()) {
    std::vector<double> d;
    const auto runs = case_runs(id, window);
    for (const auto& r : runs)
      if (r.status != "skipped" && r.status != "cancelled" && r.duration_s > 0) d.push_back(r.duration_s);
    if (d.empty()) continue;
    out.push_back({id, static_cast<int>(d.size()), median(d), d.front(), d.back()});
  }
  std::sort(out.begin(), out.end(), [](const SlowCase& a, const SlowCase& b) { return a.median_s > b.median_s; });
  if (static_cast<int>(out.size()) > limit) out.resize(static_cast<size_t>(limit));
  return out;
}

std::map<std::string, double> History::median_durations(int window, const std::string& except_commit) const {
  std::map<std::string, double> out;
  if (except_commit.empty()) {
    for (const auto& s : slowest(window, 1 << 30)) out[s.case_id] = s.median_s;
    return out;
  }
  for (const auto& id : case_ids()) {
    std::vector<double> d;
    int counted = 0;
    for (const auto& r : case_runs(id, 1 << 30)) {
      if (r.commit == except_commit) continue;
      if (++counted > window) break;
      if (r.status != "skipped" && r.status != "cancelled" && r.duration_s > 0) d.push_back(r.duration_s);
    }
    if (!d.empty()) out[id] = median(d);
  }
  return out;
}

int History::run_count() const {
  Statement q(db_->handle, "SELECT count(*) FROM runs", path_);
  return q.step() ? static_cast<int>(q.integer(0)) : 0;
}

}  // namespace meshtest
