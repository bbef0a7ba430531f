// store_tenant_sql.cpp: the tenant's own SQL on an entity's database (see entity_store.hpp):
// the authorizer that keeps it to tables named u_*, and the run of one statement. Owned by the
// store's owner thread, one at a time.
#include "factum/storage/entity_store.hpp"

#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "store/store_sql.hpp"

namespace factum {

using detail::bind_text;
using detail::col_text;

// -- tenant SQL ---------------------------------------------------------------------------------

namespace {

struct auth_ctx {
  bool read_only;
  std::string denied;
  /// The store captures its changes for a replicated log (store_options::capture_changes),
  /// which carries rows, not table definitions: a copy would miss the table and its rows.
  bool no_ddl = false;
};

bool tenant_table(const char* name) {
  return name && std::strncmp(name, "u_", 2) == 0;
}

int tenant_authorizer(void* p, int action, const char* a1, const char* a2, const char*,
                      const char*) {
  auto* ctx = static_cast<auth_ctx*>(p);
  auto deny = [&](std::string why) {
    if (ctx->denied.empty())
      ctx->denied = std::move(why);
    return SQLITE_DENY;
  };
  switch (action) {
  case SQLITE_SELECT:
  case SQLITE_READ:
  case SQLITE_FUNCTION:
  case SQLITE_RECURSIVE: return SQLITE_OK; // reading any table of its own database is allowed
  case SQLITE_INSERT:
  case SQLITE_UPDATE:
  case SQLITE_DELETE:
    if (ctx->read_only)
      return deny("this statement must be read-only");
    if (tenant_table(a1))
      return SQLITE_OK;
    if (a1 && (std::strcmp(a1, "sqlite_master") == 0 || std::strcmp(a1, "sqlite_schema") == 0 ||
               std::strcmp(a1, "sqlite_sequence") == 0))
      return SQLITE_OK; // bookkeeping of CREATE/DROP on u_ tables, authorized below
    return deny(std::string("writes are allowed only to tables named u_*, not ") + (a1 ? a1 : "?"));
  case SQLITE_CREATE_TABLE:
  case SQLITE_DROP_TABLE:
    if (ctx->read_only)
      return deny("this statement must be read-only");
    if (ctx->no_ddl)
      return deny("tenant tables cannot be created or dropped in a replicated cluster yet (the "
                  "replicated log carries rows, not table definitions)");
    return tenant_table(a1) ? SQLITE_OK : deny("tenant tables must be named u_*");
  case SQLITE_CREATE_INDEX:
  case SQLITE_DROP_INDEX:
    if (ctx->read_only)
      return deny("this statement must be read-only");
    return tenant_table(a2) ? SQLITE_OK : deny("indexes only on tenant tables u_*");
  case SQLITE_ALTER_TABLE:
    if (ctx->read_only)
      return deny("this statement must be read-only");
    if (ctx->no_ddl)
      return deny("tenant tables cannot be altered in a replicated cluster yet (the replicated "
                  "log carries rows, not table definitions)");
    return tenant_table(a2) ? SQLITE_OK : deny("only tenant tables u_* can be altered");
  default:
    return deny("statement kind not allowed in tenant SQL (action " + std::to_string(action) + ")");
  }
}

} // namespace

result<nlohmann::json> entity_store::tenant_sql(std::string_view sql, const nlohmann::json& params,
                                                bool read_only) {
  if (!read_only)
    if (auto st = ensure_batch(); !st)
      return st;
  auth_ctx ctx{read_only || opts_.read_only, {}, opts_.capture_changes};
  sqlite3_set_authorizer(db_, tenant_authorizer, &ctx);
  sqlite3_stmt* st = nullptr;
  const char* tail = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &st, &tail);
  sqlite3_set_authorizer(db_, nullptr, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = ctx.denied.empty() ? sqlite3_errmsg(db_) : ctx.denied;
    sqlite3_finalize(st);
    return status{errc::invalid_argument, "tenant SQL refused: " + msg};
  }
  std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> owner(st, sqlite3_finalize);
  if (!st)
    return status{errc::invalid_argument, "tenant SQL is empty"};
  while (tail && *tail && (*tail == ' ' || *tail == '\n' || *tail == '\t' || *tail == ';'))
    ++tail;
  if (tail && *tail && tail < sql.data() + sql.size())
    return status{errc::invalid_argument, "tenant SQL must be a single statement"};
  if (ctx.read_only && !sqlite3_stmt_readonly(st))
    return status{errc::invalid_argument, "tenant SQL must be read-only here"};
  if (!params.is_null() && !params.is_array())
    return status{errc::invalid_argument, "tenant SQL parameters must be a JSON array"};
  int i = 1;
  for (auto& p : params.is_array() ? params : nlohmann::json::array()) {
    if (p.is_null())
      sqlite3_bind_null(st, i);
    else if (p.is_boolean())
      sqlite3_bind_int64(st, i, p.get<bool>() ? 1 : 0);
    else if (p.is_number_integer())
      sqlite3_bind_int64(st, i, p.get<int64_t>());
    else if (p.is_number())
      sqlite3_bind_double(st, i, p.get<double>());
    else if (p.is_string())
      bind_text(st, i, p.get_ref<const std::string&>());
    else
      return status{errc::invalid_argument, "tenant SQL parameters must be JSON scalars"};
    ++i;
  }
  nlohmann::json rows = nlohmann::json::array();
  if (int frc = fault_check("tenant sql"); frc != SQLITE_OK)
    return fail(frc, "tenant sql");
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    nlohmann::json row = nlohmann::json::object();
    int n = sqlite3_column_count(st);
    for (int c = 0; c < n; ++c) {
      const char* name = sqlite3_column_name(st, c);
      switch (sqlite3_column_type(st, c)) {
      case SQLITE_INTEGER: row[name] = sqlite3_column_int64(st, c); break;
      case SQLITE_FLOAT: row[name] = sqlite3_column_double(st, c); break;
      case SQLITE_NULL: row[name] = nullptr; break;
      default: row[name] = col_text(st, c);
      }
    }
    rows.push_back(std::move(row));
  }
  if (rc != SQLITE_DONE)
    return fail(rc, "tenant sql");
  return rows;
}

} // namespace factum
