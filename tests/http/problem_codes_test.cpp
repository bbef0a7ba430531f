// problem_codes_test.cpp: the error table (factum/entities/problems.hpp) against the list of
// problem codes in docs/http-api.md ("Status codes and error codes", read from the file the
// build names in FACTUM_HTTP_API_DOC): each code of the table is in the doc once, with its status
// and category, and the doc lists no code the table cannot produce; every errc has one answer in
// each scope; a status's category is category_of_status's, for the table and the classifier
// alike. Runs on the test thread.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "factum/entities/problems.hpp"
#include "factum/resilience/classifier.hpp"

using namespace factum;

namespace problem_codes_test {

/// One row of the doc's table that names a code.
struct doc_row {
  int status = 0;
  std::string code;
  std::string category;
  int line = 0;
};

/// The doc's table: the rows that name a code, and what is wrong with the rows that cannot be
/// read (a row must name one code, in backticks, under a numeric status).
struct doc_table {
  std::vector<doc_row> rows;
  std::vector<std::string> malformed;
  bool found = false;
};

std::string trim(std::string s) {
  auto b = s.find_first_not_of(' ');
  auto e = s.find_last_not_of(' ');
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  size_t pos = 1; // after the leading '|'
  while (pos < line.size()) {
    auto bar = line.find('|', pos);
    if (bar == std::string::npos)
      break;
    out.push_back(trim(line.substr(pos, bar - pos)));
    pos = bar + 1;
  }
  return out;
}

doc_table read_doc(const std::string& path) {
  doc_table t;
  std::ifstream in(path);
  std::string line;
  bool inside = false;
  int n = 0;
  static const std::regex status_re("[0-9]{3}");
  static const std::regex code_re("`([A-Z][A-Z0-9_]*)`");
  while (std::getline(in, line)) {
    ++n;
    if (line.rfind("## ", 0) == 0) {
      inside = line == "## Status codes and error codes";
      t.found = t.found || inside;
      continue;
    }
    if (!inside || line.rfind("|", 0) != 0)
      continue;
    auto c = cells(line);
    if (c.size() < 4 || c[0] == "status" || c[0].rfind("---", 0) == 0)
      continue;
    if (!std::regex_match(c[0], status_re) || c[1].empty())
      continue; // "200" (success) and "any" (the handler's): no code of the table
    std::smatch m;
    if (!std::regex_match(c[1], m, code_re)) {
      t.malformed.push_back("line " + std::to_string(n) + ": " + line.substr(0, 80));
      continue;
    }
    t.rows.push_back({std::stoi(c[0]), m[1].str(), c[2], n});
  }
  return t;
}

const doc_table& doc() {
  static const doc_table t = read_doc(FACTUM_HTTP_API_DOC);
  return t;
}

/// The entries whose category is not the one their status implies, each for a reason the table
/// gives beside it.
const std::set<std::string> named_exceptions = {"DEGRADATION_NOT_ENABLED", "TENANT_QUOTA_EXCEEDED",
                                                "JOURNAL_MISMATCH", "SHARED_CALL_READ_ONLY",
                                                "TENANT_STORAGE_QUOTA_EXCEEDED"};

/// The last errc; a code added after it has a name in to_string, which the errc test notices.
constexpr errc last_errc = errc::quota_exceeded;

} // namespace problem_codes_test

TEST_CASE("problem codes: docs/http-api.md's table is found and every row that names a code "
          "names exactly one") {
  REQUIRE_MESSAGE(problem_codes_test::doc().found,
                  FACTUM_HTTP_API_DOC << " has no \"Status codes and error codes\"");
  CHECK(problem_codes_test::doc().rows.size() > 50);
  for (const auto& bad : problem_codes_test::doc().malformed)
    FAIL_CHECK("a row of the doc's table does not name one `CODE`: " << bad);
}

TEST_CASE("problem codes: every code of the error table is in the doc once, with its status and "
          "category") {
  for (const auto& p : problem_table) {
    std::string code(p.code);
    std::vector<const problem_codes_test::doc_row*> found;
    for (const auto& r : problem_codes_test::doc().rows)
      if (r.code == code)
        found.push_back(&r);
    CHECK_MESSAGE(found.size() == 1, code << " is in docs/http-api.md's table " << found.size()
                                          << " times (add one row for it, or remove the extra)");
    for (const auto* r : found) {
      CHECK_MESSAGE(r->status == p.status, code << ": the doc says " << r->status << " (line "
                                                << r->line << "), the table " << p.status);
      CHECK_MESSAGE(r->category == to_string(p.category),
                    code << ": the doc says category " << r->category << " (line " << r->line
                         << "), the table " << to_string(p.category));
    }
  }
}

TEST_CASE("problem codes: every code the doc lists is one the error table produces") {
  for (const auto& r : problem_codes_test::doc().rows)
    CHECK_MESSAGE(find_problem(r.code) != nullptr, r.code << " (docs/http-api.md line " << r.line
                                                          << ") is in no entry of the "
                                                          << "error table: nothing answers it");
}

TEST_CASE("problem codes: the error table has each code once, as a stable upper-case name") {
  static const std::regex code_re("[A-Z][A-Z0-9_]*");
  std::map<std::string, int> seen;
  for (const auto& p : problem_table) {
    std::string code(p.code);
    CHECK_MESSAGE(std::regex_match(code, code_re), code);
    CHECK_MESSAGE(++seen[code] == 1, code << " is in the table twice");
    CHECK_MESSAGE((p.status >= 400 && p.status <= 599), code << " " << p.status);
    CHECK(find_problem(p.code) == &p);
  }
  CHECK(find_problem("NO_SUCH_CODE") == nullptr);
}

TEST_CASE("problem codes: every errc has one answer in each scope, an entry of the table") {
  REQUIRE(to_string(static_cast<errc>(static_cast<int>(problem_codes_test::last_errc) + 1)) ==
          "INTERNAL");
  auto in_table = [](const problem_kind* k) {
    return std::any_of(std::begin(problem_table), std::end(problem_table),
                       [k](const problem_kind& p) { return &p == k; });
  };
  for (int i = 1; i <= static_cast<int>(problem_codes_test::last_errc); ++i) {
    auto code = static_cast<errc>(i);
    std::map<errc_scope, int> rows;
    for (const auto& e : errc_table)
      if (e.code == code) {
        ++rows[e.scope];
        CHECK(in_table(e.kind));
      }
    CHECK_MESSAGE(rows[errc_scope::any] == 1,
                  to_string(code) << " has " << rows[errc_scope::any] << " rows of scope any");
    for (auto scope :
         {errc_scope::any, errc_scope::restore, errc_scope::shard_move, errc_scope::move_file}) {
      CHECK(rows[scope] <= 1);
      CHECK(in_table(&problem_of(code, scope)));
    }
  }
  CHECK(&problem_of(errc::ok) == &problems::internal);
}

TEST_CASE("problem codes: errc answers, including where the routes used to disagree") {
  CHECK(&problem_of(errc::invalid_argument) == &problems::invalid_argument);
  CHECK(&problem_of(errc::not_found) == &problems::not_found);
  CHECK(&problem_of(errc::corruption) == &problems::entity_storage_corrupt);
  CHECK(&problem_of(errc::io_error) == &problems::storage_unavailable);
  CHECK(&problem_of(errc::full) == &problems::storage_full);
  CHECK(&problem_of(errc::quota_exceeded) == &problems::tenant_quota_exceeded);
  // busy was STORAGE_UNAVAILABLE for calls, ENTITY_BUSY for rollbacks, MOVE_REFUSED for moves.
  CHECK(&problem_of(errc::busy) == &problems::entity_busy);
  CHECK(&problem_of(errc::busy, errc_scope::restore) == &problems::entity_busy);
  CHECK(&problem_of(errc::busy, errc_scope::move_file) == &problems::move_refused);
  // unavailable was STORAGE_UNAVAILABLE for calls, UNAVAILABLE for rollbacks, 503 MOVE_REFUSED
  // for moves.
  CHECK(&problem_of(errc::unavailable) == &problems::unavailable);
  CHECK(&problem_of(errc::unavailable, errc_scope::shard_move) == &problems::unavailable);
  CHECK(&problem_of(errc::unavailable, errc_scope::move_file) == &problems::unavailable);
  CHECK(&problem_of(errc::corruption, errc_scope::restore) == &problems::archive_corrupt);
  CHECK(&problem_of(errc::full, errc_scope::restore) == &problems::storage_full);
  CHECK(&problem_of(errc::conflict, errc_scope::shard_move) == &problems::move_refused);
  CHECK(&problem_of(errc::invalid_argument, errc_scope::shard_move) == &problems::move_refused);
  CHECK(&problem_of(errc::not_found, errc_scope::shard_move) == &problems::move_refused);
  CHECK(&problem_of(errc::invalid_argument, errc_scope::move_file) == &problems::move_file_invalid);
  CHECK(&problem_of(errc::corruption, errc_scope::move_file) == &problems::move_file_invalid);
  CHECK(&problem_of(errc::full, errc_scope::move_file) == &problems::storage_full);
  CHECK(problems::move_refused.status == 409);
  CHECK(problems::tenant_quota_exceeded.category == error_category::client);
  CHECK(problems::storage_unavailable.retryable());
  CHECK_FALSE(problems::tenant_quota_exceeded.retryable());
  auto e = problem_of(errc::full).error("disk full");
  CHECK(e.code() == "STORAGE_FULL");
  CHECK(e.http_status() == 503);
  CHECK(e.category() == error_category::transient);
  auto r = problems::not_found.reply("no such bookmark");
  CHECK(r.http_status == 404);
  CHECK(r.code == "NOT_FOUND");
  CHECK(r.json().value("type", "") == "urn:factum:problem:NOT_FOUND");
  CHECK(r.json().value("category", "") == "client");
}

TEST_CASE("problem codes: a status's category is category_of_status's, for the table's entries "
          "and the classifier's, and 507 is server") {
  for (const auto& p : problem_table)
    if (p.category != category_of_status(p.status))
      CHECK_MESSAGE(problem_codes_test::named_exceptions.count(std::string(p.code)) == 1,
                    p.code << " is " << to_string(p.category) << ", its status "
                           << to_string(category_of_status(p.status)));
  resilience::classifier cl;
  for (int status = 100; status <= 599; ++status)
    CHECK_MESSAGE(cl.classify_http("", status, true).category == category_of_status(status),
                  status);
  CHECK(category_of_status(507) == error_category::server);
  CHECK(cl.classify_http("", 507, true).retryable);
  CHECK_FALSE(cl.classify_http("", 507, false).retryable);
  CHECK(category_of_status(302) == error_category::external);
  CHECK_FALSE(cl.classify_http("", 302, true).retryable);
}
