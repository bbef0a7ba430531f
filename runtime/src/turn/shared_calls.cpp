// shared_calls.cpp: the turn runner's shared (read-only) calls (turn_runner.hpp, "shared
// calls"): which calls are shared, the built-in reads, and a shared method run on a
// shared_context beside the turn that runs or waits. Runs on the entity's actor thread.
#include <cctype>
#include <string>
#include <string_view>

#include "factum/storage/json_text.hpp"
#include "factum/storage/record_json.hpp"
#include "turn/call_errors.hpp"
#include "turn/entity_context.hpp"
#include "turn/shared_context.hpp"
#include "turn/tool_call.hpp"
#include "turn/turn_runner.hpp"

namespace factum::detail {

using nlohmann::json;

namespace {

/// `text` percent-encoded but for RFC 3986's unreserved characters: a key in a query.
std::string query_encoded(std::string_view text) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

/// @keys: a page of the entity's idempotency keys in key order (`after`, `limit`); the cursor
/// names the next page's `after` when keys follow.
json read_keys(entity_store& store, const json& args, std::string& cursor) {
  auto after = args.value("after", std::string());
  auto limit = args.value("limit", int64_t{100});
  bool more = false;
  auto keys = value_or_throw(store.list_keys_after(after, limit, more));
  json out = json::array();
  for (auto& k : keys)
    out.push_back(key_json(k));
  if (more && !keys.empty())
    cursor = "after=" + query_encoded(keys.back().key);
  return out;
}

/// Where a client that read the facts up to `seq` numbered under `prefix` (empty: the entity's
/// first prefix) stands in the entity's history now (fact streams resuming: fact_ids.hpp): the
/// last seq up to which it holds the same facts, and the entity's first prefix.
json read_history(entity_store& store, const json& args) {
  auto seq = args.value("seq", int64_t{0});
  auto prefix = args.value("prefix", std::string());
  auto& ids = store.fact_ids();
  if (ids.empty()) // a file kept at a schema version before 4: one history
    return {{"first_prefix", ""}, {"shared_until", seq}};
  int64_t from = prefix.empty() ? 0 : ids.find(prefix);
  return {{"first_prefix", ids.epochs().front().prefix},
          {"shared_until", ids.shared_until(from, seq)}};
}

} // namespace

bool turn_runner::is_read(const std::string& method) {
  return method == "@facts" || method == "@verify" || method == "@alarms" ||
         method == "@dead_letters" || method == "@breakers" || method == "@keys" ||
         method == "@history";
}

bool turn_runner::is_shared(const call_request& req) const {
  if (req.method.empty())
    return false;
  if (req.method[0] == '@')
    return is_read(req.method);
  auto* m = env_.type->find(req.method);
  return m && m->options.shared;
}

json turn_runner::read_internal(const std::string& method, const json& args, std::string& cursor) {
  if (method == "@facts") {
    auto f = fact_filter::from_json(args);
    if (!f)
      throw storage_error(f.error());
    f->max_bytes = env_.cfg->max_facts_bytes;
    bool more = false;
    auto facts = value_or_throw(store().query(*f, &more));
    json out = json::array();
    for (auto& fa : facts)
      out.push_back(to_json(fa));
    if (more && !facts.empty())
      cursor = (f->newest_first ? "before_seq=" : "after_seq=") + std::to_string(facts.back().seq);
    return out;
  }
  if (method == "@verify") {
    auto r = value_or_throw(store().verify());
    return {{"ok", r.ok},
            {"facts_checked", r.facts_checked},
            {"first_bad_seq", r.first_bad_seq},
            {"problem", r.problem}};
  }
  if (method == "@alarms")
    return alarms_json(store()); // schedule_turns.cpp: each schedule with its alarm
  if (method == "@dead_letters")
    return list_dead_letters(*ctx_, args);
  if (method == "@breakers")
    return list_breakers(*ctx_);
  if (method == "@keys")
    return read_keys(store(), args, cursor);
  if (method == "@history")
    return read_history(store(), args);
  throw problems::method_not_found.error("no internal method " + method);
}

call_reply turn_runner::run_shared(const call_request& req, bool& ran) {
  ran = false;
  try {
    // A key is not recorded for a read, but a key used with another request is refused.
    if (!req.idempotency_key.empty()) {
      auto p = value_or_throw(store().peek_key(req.idempotency_key, req.fingerprint, now()));
      if (p.outcome == key_outcome::mismatch) {
        env_.stats->key_mismatches.inc();
        return problems::idempotency_key_mismatch.reply(
          "this idempotency key was used with a different request");
      }
    }
    ran = true;
    json args = req.args.empty() ? json::object() : json::parse(req.args);
    if (req.method[0] == '@') {
      std::string cursor;
      auto r = call_reply::success(json_text(read_internal(req.method, args, cursor)));
      r.cursor = std::move(cursor);
      return r;
    }
    call_info info{req.method, req.idempotency_key, req.trace_id, req.args, req.fingerprint};
    // Held by the handler's frame too: a handler that suspended anyway (on an awaitable that is
    // not the context's) keeps it alive instead of dangling.
    auto sc = std::make_shared<shared_context>(store(), *env_.key, std::move(info));
    struct outcome {
      bool done = false;
      std::exception_ptr err;
      std::optional<json> value;
    };
    auto out = std::make_shared<outcome>();
    start_task(env_.type->find(req.method)->fn(*instance_, *sc, std::move(args)),
               [out, sc](std::exception_ptr e, std::optional<json> v) {
                 out->done = true;
                 out->err = e;
                 out->value = std::move(v);
               });
    if (!out->done)
      throw shared_read_only("suspend");
    if (out->err)
      std::rethrow_exception(out->err);
    return call_reply::success(out->value ? json_text(*out->value) : std::string("null"));
  } catch (...) {
    return call_reply::failure(to_call_error(std::current_exception()));
  }
}

call_request turn_runner::shared_failure_record(const call_request& req, const call_reply& r) {
  call_request rec;
  rec.method = "@shared_failed";
  rec.trace_id = req.trace_id;
  auto problem = r.json();
  rec.args = json{{"method", req.method},
                  {"trace_id", req.trace_id},
                  {"code", r.code},
                  {"category", r.category},
                  {"retryable", r.retryable},
                  {"message", problem.is_object() ? problem.value("detail", "") : ""}}
               .dump();
  return rec;
}

} // namespace factum::detail
