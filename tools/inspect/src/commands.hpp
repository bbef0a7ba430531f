// commands.hpp (private to factum_inspect): the options each subcommand parses and the
// functions that run them, plus helpers the command files share. Every run_* function runs on
// the thread that parses the command line and returns the process exit code.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "entity_reader.hpp"
#include "factum/storage/entity_key.hpp"
#include "factum/storage/fact.hpp"
#include "output.hpp"

namespace factum::tools {

struct inspect_io; // factum/tools/inspect.hpp (not included: it brings CLI11)
class remote_api;  // remote.hpp

/// Options every subcommand takes.
struct common_options {
  std::string data;        ///< --data DIR (local mode)
  bool json = false;       ///< --json
  bool table = false;      ///< --table
  bool no_color = false;   ///< --no-color
  bool local_time = false; ///< --local
  std::string server;      ///< --server URL (facts, tail, dead-letters, breakers)
  std::string api_key;     ///< --api-key KEY / FACTUM_API_KEY
  double http_timeout_s = 10;
  std::string archive;   ///< --archive DIR: the continuous archive (bookmarks, --as-of)
  std::string as_of;     ///< --as-of TIME|BOOKMARK: the entity as it was (needs --archive)
  std::string as_of_seq; ///< --as-of-seq N: the entity at its last commit with seq <= N
};

/// The run context of one run from `io` and --json/--table/--no-color/--local (a table on a
/// terminal, JSON lines otherwise); messages start with `tool`. The caller refuses --json with
/// --table.
std::unique_ptr<run_ctx> make_run_ctx(const inspect_io& io, const common_options& c,
                                      std::string tool);

/// Fact filters and the listing/follow options of `facts` and `tail`.
struct fact_options {
  std::string type, subtype, since, until, trace, tool, key;
  std::string after_seq, before_seq; ///< empty: absent
  int64_t limit = 100;               ///< facts: 0 = all
  bool newest = false;
  bool follow = false;
  int64_t lines = 10;        ///< tail: backlog size
  int64_t max_facts = 0;     ///< follow: stop after this many new facts (0: no bound)
  double timeout_s = 0;      ///< follow: stop after this many seconds (0: no bound)
  int64_t interval_ms = 200; ///< follow: poll period
};

/// A subset of entities named on the command line: "" (all), "tenant", "tenant/type" or
/// "tenant/type/id".
struct entity_scope {
  std::string tenant, type, id;
  bool all() const { return tenant.empty(); }
  bool single() const { return !id.empty(); }
  bool contains(const entity_key& k) const {
    return (tenant.empty() || k.tenant == tenant) && (type.empty() || k.type == type) &&
           (id.empty() || k.id == id);
  }
  std::string to_string() const;
};
result<entity_scope> parse_scope(std::string_view text);

/// Parses the entity argument (INVALID_ARGUMENT -> exit 2).
result<entity_key> parse_entity(std::string_view text);

/// What a command that walks `data` says on stderr when `scope` took no entity there: "no
/// entities under DATA", or "no entities of SCOPE under DATA".
std::string no_entities_message(const entity_scope& scope, const std::string& data);

/// Checks that --data was given (and --server was not); an exit code, or 0.
int require_local(const run_ctx& ctx, const common_options& c, const char* command);

/// An entity opened for reading, or the exit code: under --data as it is now, or with --as-of
/// or --as-of-seq as it was at a commit of the continuous archive under --archive (the commit
/// in `reader->archived()`). `now` is the time the state is judged at (expiry, overdue): the
/// clock's for the live file, the commit's for an archived one.
struct opened_entity {
  std::unique_ptr<entity_reader> reader;
  int64_t now = 0;
  int rc = 0;
};
opened_entity open_entity(const run_ctx& ctx, const common_options& c, const std::string& entity,
                          const char* command);

/// Builds the store filter from the options (times and seqs parsed); INVALID_ARGUMENT on a bad
/// value. `limit` is left to the caller.
result<fact_filter> make_filter(const run_ctx& ctx, const fact_options& o);

/// Every entity file under `data_dir` inside `scope`, in file order: `fn` gets each readable
/// one; `on_error` each file that cannot be read (its key is unknown). NOT_FOUND when the
/// data directory does not exist.
status
for_each_entity(const std::filesystem::path& data_dir, const entity_scope& scope,
                const std::function<void(entity_reader&)>& fn,
                const std::function<void(const std::filesystem::path&, const status&)>& on_error);

/// `shards` > 0: each entity's cluster shard among that many (a SHARD column, "shard" in JSON).
int run_entities(const run_ctx& ctx, const common_options& c, const std::string& scope,
                 uint32_t shards = 0);
int run_facts(const run_ctx& ctx, const common_options& c, const std::string& entity,
              const fact_options& o, bool tail);
int run_show(const run_ctx& ctx, const common_options& c, const std::string& entity,
             const std::string& which);
int run_keys(const run_ctx& ctx, const common_options& c, const std::string& entity,
             const std::string& status, int64_t limit);
/// The journals of durable execution in the entity's file, or one of them (a call's by its
/// idempotency key, or any by its name as listed: key:K, alarm:NAME, dl:ID) step by step.
int run_journal(const run_ctx& ctx, const common_options& c, const std::string& entity,
                const std::string& call_key, const std::string& journal);
int run_alarms(const run_ctx& ctx, const common_options& c, const std::string& entity);
/// The entity's whole state besides its facts in one view (archive_cmd.cpp): its chain head and
/// fact count, keys, alarms and schedules, breakers and dead letters; now, or as of an
/// archived commit.
int run_state(const run_ctx& ctx, const common_options& c, const std::string& entity);
/// The archived commit at a time (--at) or a seq (--seq): from --archive, or through --server.
int run_bookmark(const run_ctx& ctx, const common_options& c, const std::string& entity,
                 const std::string& at, const std::string& seq);
/// Asks the bookmark route under `route` (/v1/entities/TYPE/ID) for --at or --seq and prints
/// the answer (`factum inspect bookmark --server` and `factum operate bookmark`).
int print_remote_bookmark(const run_ctx& ctx, const remote_api& api, const std::string& route,
                          const std::string& at, const std::string& seq);
/// The entity's archived commits (each a bookmark), oldest first, within --since/--until.
int run_bookmarks(const run_ctx& ctx, const common_options& c, const std::string& entity,
                  const std::string& since, const std::string& until, int64_t limit, bool newest);
int run_owners(const run_ctx& ctx, const common_options& c, const std::string& entity);
int run_breakers(const run_ctx& ctx, const common_options& c, const std::string& entity);
int run_dead_letters(const run_ctx& ctx, const common_options& c, const std::string& entity,
                     const std::string& status, int64_t limit);
/// The printers of the state commands (state_cmd.cpp), shared by the whole-state view: a table,
/// or a JSON line per record with "record": `record` added when it is not empty. `now`: the
/// time expiry and overdue are judged at.
status print_keys(const run_ctx& ctx, entity_store& store, const std::string& status_filter,
                  int64_t limit, int64_t now, const char* record);
status print_alarms(const run_ctx& ctx, entity_store& store, int64_t now, const char* record);
void print_breakers(const run_ctx& ctx, const std::vector<breaker_record>& list,
                    const char* record);
void print_dead_letters(const run_ctx& ctx, const std::vector<dead_letter_record>& list,
                        std::optional<dl_status> filter, int64_t limit, const char* record);
/// The fleet views (fleet_cmd.cpp): under --data every entity file of the scope; with --server
/// the API key's tenant through GET /v1/entities?order=last_activity, /v1/dead-letters and
/// /v1/breakers (no scope then).
int run_recent(const run_ctx& ctx, const common_options& c, const std::string& scope,
               int64_t limit);
int run_fleet_dead_letters(const run_ctx& ctx, const common_options& c, const std::string& scope,
                           const std::string& state, const std::string& reason, int64_t limit);
int run_fleet_breakers(const run_ctx& ctx, const common_options& c, const std::string& scope,
                       const std::string& tool);
int run_economics(const run_ctx& ctx, const common_options& c, const std::string& scope,
                  const std::string& since, const std::string& until);
int run_verify(const run_ctx& ctx, const common_options& c, const std::string& scope);

} // namespace factum::tools
