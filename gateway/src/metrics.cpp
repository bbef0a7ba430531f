// http/metrics.cpp: Prometheus text exposition (format 0.0.4) of the gateway's counters and of
// runtime_stats. Any thread.
#include "metrics.hpp"

#include <algorithm>
#include <cstdio>
#include <optional>

namespace factum::http {

namespace {

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void sample(std::string& out, const char* name, uint64_t v) {
  out += name;
  out += ' ';
  out += std::to_string(v);
  out += '\n';
}

void metric(std::string& out, const char* name, const char* type, const char* help, uint64_t v) {
  header(out, name, type, help);
  sample(out, name, v);
}

/// `name{label="value",...} v`. Label values here are route labels, numbers and entity key
/// parts ([A-Za-z0-9._:-]): nothing to escape.
void labeled(std::string& out, std::string_view name,
             std::initializer_list<std::pair<std::string_view, std::string_view>> labels,
             int64_t v) {
  out += name;
  char sep = '{';
  for (auto& [label, value] : labels) {
    out += sep;
    out += label;
    out += "=\"";
    out += value;
    out += '"';
    sep = ',';
  }
  out += "} ";
  out += std::to_string(v);
  out += '\n';
}

/// The quota refusals, the tenant index, and the usage of each tenant that has a quota (as many
/// series as configured quotas: bounded).
void render_tenants(std::string& out, const runtime_stats& rt) {
  header(out, "factum_tenant_quota_refusals_total", "counter",
         "Calls refused by a tenant quota: 429 TENANT_QUOTA_EXCEEDED (quota=\"max_entities\"), "
         "507 TENANT_STORAGE_QUOTA_EXCEEDED (quota=\"max_bytes\").");
  labeled(out, "factum_tenant_quota_refusals_total", {{"quota", "max_entities"}},
          static_cast<int64_t>(rt.tenant_entity_refusals));
  labeled(out, "factum_tenant_quota_refusals_total", {{"quota", "max_bytes"}},
          static_cast<int64_t>(rt.tenant_bytes_refusals));
  metric(out, "factum_tenant_index_rebuilds_total", "counter",
         "Tenant indexes rebuilt from the entity files at start (damaged, missing, incomplete).",
         rt.tenant_index_rebuilds);
  metric(out, "factum_tenant_index_failures_total", "counter",
         "Tenant index writes that failed (creations that needed one were refused 503).",
         rt.tenant_index_failures);
  struct gauge {
    const char* name;
    const char* help;
    std::optional<int64_t> (*value)(const tenant_usage&);
  };
  static const gauge gauges[] = {
    {"factum_tenant_entities", "Entity files of a tenant with a quota (creations under way too).",
     [](const tenant_usage& u) -> std::optional<int64_t> { return u.entities; }},
    {"factum_tenant_bytes", "Bytes of a tenant's entity files (.db and -wal), as last measured.",
     [](const tenant_usage& u) -> std::optional<int64_t> { return u.bytes; }},
    {"factum_tenant_max_entities", "A tenant's max_entities quota.",
     [](const tenant_usage& u) { return u.quota.max_entities; }},
    {"factum_tenant_max_bytes", "A tenant's max_bytes quota.",
     [](const tenant_usage& u) { return u.quota.max_bytes; }},
  };
  for (auto& g : gauges) {
    header(out, g.name, "gauge", g.help);
    for (auto& u : rt.tenants)
      if (auto v = g.value(u))
        labeled(out, g.name, {{"tenant", u.tenant}}, *v);
  }
  header(out, "factum_degradation_level", "gauge",
         "A tenant's degradation level: 0 full, 1 reduced, 2 limited, 3 minimal, 4 emergency "
         "(configured tenants, and any a rule named; none when levels are not enabled).");
  for (auto& d : rt.degradation)
    labeled(out, "factum_degradation_level", {{"tenant", d.tenant}}, d.level);
  metric(out, "factum_degradation_changes_total", "counter",
         "Moves of a tenant's degradation level.", rt.degradation_changes);
}

std::string fmt_double(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

/// The entity WAL sync histogram (runtime_stats::sync_*).
void render_syncs(std::string& out, const runtime_stats& rt) {
  const char* name = "factum_storage_sync_duration_seconds";
  header(out, name, "histogram",
         "Entity WAL syncs (an fdatasync each in durability full) by duration.");
  uint64_t cumulative = 0;
  for (size_t i = 0; i < rt.sync_buckets.size(); ++i) {
    cumulative += rt.sync_buckets[i];
    out += name;
    out += "_bucket{le=\"";
    out += i < rt.sync_bounds.size() ? fmt_double(rt.sync_bounds[i]) : std::string("+Inf");
    out += "\"} " + std::to_string(cumulative) + '\n';
  }
  out += std::string(name) + "_sum " + fmt_double(rt.sync_seconds) + '\n';
  out += std::string(name) + "_count " + std::to_string(rt.syncs) + '\n';
}

} // namespace

void http_metrics::count_request(std::string_view route, int status, std::string_view tenant) {
  std::lock_guard<std::mutex> g(mu_);
  ++requests_[{route, status}];
  if (tenant.empty())
    return;
  auto it = tenant_requests_.find(tenant); // a string only the first time a tenant is seen
  if (it == tenant_requests_.end())
    it = tenant_requests_.emplace(std::string(tenant), per_class{}).first;
  ++it->second[std::clamp(status / 100, 0, 5)];
}

void http_metrics::observe_call(std::chrono::nanoseconds d) {
  double s = std::chrono::duration<double>(d).count();
  size_t i = 0;
  while (i < bounds.size() && s > bounds[i])
    ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  call_count_.fetch_add(1, std::memory_order_relaxed);
  call_ns_sum_.fetch_add(static_cast<uint64_t>(std::max<int64_t>(0, d.count())),
                         std::memory_order_relaxed);
}

/// The request counters: by route and status, and by tenant and status class.
void http_metrics::render_requests(std::string& out) const {
  header(out, "factum_http_requests_total", "counter",
         "HTTP requests answered, by route and status.");
  std::lock_guard<std::mutex> g(mu_);
  for (auto& [k, v] : requests_)
    labeled(out, "factum_http_requests_total",
            {{"route", k.first}, {"status", std::to_string(k.second)}}, static_cast<int64_t>(v));
  header(out, "factum_tenant_requests_total", "counter",
         "HTTP requests of an authenticated tenant, by status class (2xx, 4xx, 5xx).");
  for (auto& [tenant, classes] : tenant_requests_)
    for (int c = 0; c < static_cast<int>(classes.size()); ++c)
      if (classes[c] > 0)
        labeled(out, "factum_tenant_requests_total",
                {{"tenant", tenant}, {"class", std::to_string(c) + "xx"}},
                static_cast<int64_t>(classes[c]));
}

/// The cluster's series: the node's lease and shards, relays, and the runtime's fenced writes.
void http_metrics::render_cluster(std::string& out, const runtime_stats& rt,
                                  const cluster_stats& c) const {
  auto ld = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  metric(out, "factum_cluster_lease_live", "gauge", "1 while this node holds a live lease in etcd.",
         c.lease_live ? 1 : 0);
  metric(out, "factum_cluster_lease_renewals_total", "counter", "Lease keep-alives etcd answered.",
         c.renewals);
  metric(out, "factum_cluster_lease_renewal_failures_total", "counter",
         "Lease keep-alives etcd did not answer.", c.renewal_failures);
  header(out, "factum_cluster_lease_renewal_seconds_sum", "counter",
         "Time of the answered keep-alives (divide by the renewals for the mean).");
  out += "factum_cluster_lease_renewal_seconds_sum " +
         std::to_string(static_cast<double>(c.renewal_us_sum) / 1e6) + '\n';
  metric(out, "factum_cluster_leases_lost_total", "counter",
         "Times etcd no longer knew this node's lease (it had stopped renewing, e.g. paused).",
         c.leases_lost);
  metric(out, "factum_cluster_shard_acquisitions_total", "counter",
         "Shards this node acquired (each under a new epoch).", c.acquisitions);
  metric(out, "factum_cluster_shards_owned", "gauge", "Shards this node serves now.",
         c.shards_owned);
  metric(out, "factum_cluster_shard_moves_total", "counter",
         "Shards this node handed over to another node (planned moves).", c.moves_done);
  metric(out, "factum_cluster_shard_moves_failed_total", "counter",
         "Planned moves of this node's shards given up (the shard stayed here).", c.moves_failed);
  metric(out, "factum_cluster_shards_moving", "gauge", "Shards this node is moving out now.",
         c.shards_moving);
  metric(out, "factum_cluster_shard_takeovers_total", "counter",
         "Shards this node took over from a node whose lease had run out (shared storage).",
         c.takeovers);
  metric(out, "factum_cluster_shards_unindexed", "gauge",
         "Shards this node serves whose entity files its listing and alarm indexes do not hold "
         "yet (shared storage: indexing, or files another process still has open).",
         c.shards_unindexed);
  header(out, "factum_cluster_move_files_total", "counter",
         "Entity files of planned shard moves, sent and received by this node.");
  labeled(out, "factum_cluster_move_files_total", {{"direction", "sent"}}, c.files_sent);
  labeled(out, "factum_cluster_move_files_total", {{"direction", "received"}}, c.files_received);
  metric(out, "factum_cluster_nodes_live", "gauge", "Nodes registered in etcd with a live lease.",
         c.nodes_live);
  header(out, "factum_cluster_forwarded_total", "counter",
         "Requests this node relayed to the entity's owner, by outcome (ok: the owner answered; "
         "not_owner: it refused, retried; failed: no answer).");
  labeled(out, "factum_cluster_forwarded_total", {{"outcome", "ok"}},
          static_cast<int64_t>(ld(forwarded_ok)));
  labeled(out, "factum_cluster_forwarded_total", {{"outcome", "not_owner"}},
          static_cast<int64_t>(ld(forwarded_not_owner)));
  labeled(out, "factum_cluster_forwarded_total", {{"outcome", "failed"}},
          static_cast<int64_t>(ld(forwarded_failed)));
  metric(out, "factum_cluster_fenced_writes_total", "counter",
         "Commits refused because this node no longer owned the entity (lease run out, or a "
         "newer epoch in the file).",
         rt.fenced_writes);
  metric(out, "factum_cluster_activations_refused_total", "counter",
         "Activations refused because the entity's shard is not this node's.",
         rt.activations_refused_not_owner);
}

namespace {

/// One labelled sample: name{tool="T",<label>="V"} N.
void tool_sample(std::string& out, const char* name, const std::string& tool,
                 std::string_view label, std::string_view value, uint64_t n) {
  out += name;
  out += "{tool=\"" + tool + "\"";
  if (!label.empty()) {
    out += ',';
    out += label;
    out += "=\"";
    out += value;
    out += '"';
  }
  out += "} " + std::to_string(n) + '\n';
}

constexpr std::string_view breaker_state_labels[] = {"closed", "open", "half_open", "forced_open",
                                                     "disabled"};

} // namespace

namespace {

/// The configured outbox sinks, labelled by their configured name (a bounded set; never an
/// entity): lag and the age of the oldest unacknowledged fact, deliveries by outcome, the breaker.
void render_outbox(std::string& out, const runtime_stats& rt) {
  auto each = [&](const char* name, const char* type, const char* help, auto value) {
    header(out, name, type, help);
    for (auto& o : rt.outbox)
      out += std::string(name) + "{sink=\"" + o.sink + "\"} " + value(o) + '\n';
  };
  auto n = [](uint64_t v) { return std::to_string(v); };
  each("factum_outbox_lag", "gauge",
       "Facts committed and not yet acknowledged by the sink, over the entities this process has "
       "seen since it started.",
       [&](const outbox_stats& o) { return n(o.lag); });
  each(
    "factum_outbox_oldest_unacked_age_seconds", "gauge",
    "Age of the oldest fact the sink has not acknowledged (0 when none).",
    [&](const outbox_stats& o) { return fmt_double(static_cast<double>(o.oldest_age_ms) / 1e3); });
  each("factum_outbox_delivered_total", "counter", "Facts the sink acknowledged.",
       [&](const outbox_stats& o) { return n(o.delivered); });
  each("factum_outbox_retries_total", "counter",
       "Deliveries that failed and are tried again after a backoff.",
       [&](const outbox_stats& o) { return n(o.retried); });
  each("factum_outbox_refused_total", "counter",
       "Facts the sink refused for good, each one a dead letter.",
       [&](const outbox_stats& o) { return n(o.refused); });
  each("factum_outbox_fast_fails_total", "counter",
       "Deliveries the sink's open circuit breaker held back.",
       [&](const outbox_stats& o) { return n(o.fast_fails); });
  each("factum_outbox_breaker_open", "gauge",
       "1 while the sink's circuit breaker holds deliveries back (open or forced open).",
       [&](const outbox_stats& o) { return n(o.breaker_state == 1 || o.breaker_state == 3); });
}

} // namespace

/// The configured tools, labelled by name (a bounded set): errors by category, retries by
/// outcome, dead letters, breaker transitions by the state entered, breakers by state.
void http_metrics::render_tools(std::string& out, const runtime_stats& rt) const {
  header(out, "factum_tool_errors_total", "counter",
         "Failed tool attempts by tool and error category.");
  for (auto& t : rt.tools)
    for (size_t i = 0; i < t.errors.size(); ++i)
      tool_sample(out, "factum_tool_errors_total", t.tool, "category",
                  to_string(static_cast<error_category>(i)), t.errors[i]);
  header(out, "factum_tool_retry_outcomes_total", "counter",
         "Tool retries by tool: attempted, calls that succeeded after retrying, retries the "
         "retry budget refused.");
  for (auto& t : rt.tools) {
    tool_sample(out, "factum_tool_retry_outcomes_total", t.tool, "outcome", "attempted", t.retries);
    tool_sample(out, "factum_tool_retry_outcomes_total", t.tool, "outcome", "succeeded",
                t.retried_ok);
    tool_sample(out, "factum_tool_retry_outcomes_total", t.tool, "outcome", "budget_refused",
                t.budget_refused);
  }
  header(out, "factum_tool_dead_letters_total", "counter",
         "Tool calls that ended as a new dead letter, by tool.");
  for (auto& t : rt.tools)
    tool_sample(out, "factum_tool_dead_letters_total", t.tool, "", "", t.dead_letters);
  header(out, "factum_tool_fast_fails_total", "counter",
         "Tool attempts an open circuit breaker refused, by tool.");
  for (auto& t : rt.tools)
    tool_sample(out, "factum_tool_fast_fails_total", t.tool, "", "", t.fast_fails);
  header(out, "factum_tool_breaker_transitions_total", "counter",
         "Circuit breaker transitions by tool and the state entered.");
  for (auto& t : rt.tools)
    for (size_t i = 0; i < t.entered.size(); ++i)
      tool_sample(out, "factum_tool_breaker_transitions_total", t.tool, "to",
                  breaker_state_labels[i], t.entered[i]);
  header(out, "factum_tool_breakers", "gauge",
         "Entities whose breaker of the tool is in the state, as last seen by this process.");
  for (auto& t : rt.tools)
    for (size_t i = 1; i < t.breakers.size(); ++i)
      tool_sample(out, "factum_tool_breakers", t.tool, "state", breaker_state_labels[i],
                  t.breakers[i]);
}

std::string_view http_metrics::ws_end_label(ws_end e) {
  switch (e) {
  case ws_end::client: return "client";
  case ws_end::entity: return "entity";
  case ws_end::rate_limit: return "rate_limit";
  case ws_end::too_big: return "too_big";
  case ws_end::slow_reader: return "slow_reader";
  case ws_end::protocol: return "protocol";
  case ws_end::idle: return "idle";
  case ws_end::failed_turn: return "failed_turn";
  case ws_end::stopping: return "stopping";
  case ws_end::moved: return "moved";
  case ws_end::count_: break;
  }
  return "unknown";
}

void http_metrics::render_websockets(std::string& out) const {
  metric(out, "factum_ws_connections", "gauge", "Open WebSocket connections.",
         static_cast<uint64_t>(std::max<int64_t>(0, ws_open.load())));
  metric(out, "factum_ws_accepted_total", "counter", "WebSocket connections on_connect accepted.",
         ws_accepted.load());
  header(out, "factum_ws_refused_total", "counter",
         "WebSocket connections refused: at a connection cap (429), or by on_connect.");
  out += "factum_ws_refused_total{reason=\"limit\"} " + std::to_string(ws_refused_limit.load()) +
         "\nfactum_ws_refused_total{reason=\"entity\"} " +
         std::to_string(ws_refused_by_entity.load()) + '\n';
  header(out, "factum_ws_closed_total", "counter", "WebSocket connections ended, by reason.");
  for (size_t i = 0; i < ws_closed_.size(); ++i) {
    out += "factum_ws_closed_total{reason=\"";
    out += ws_end_label(static_cast<ws_end>(i));
    out += "\"} " + std::to_string(ws_closed_[i].load()) + '\n';
  }
  header(out, "factum_ws_messages_total", "counter",
         "WebSocket messages: received (each a turn), sent, answered by an auto-response.");
  out += "factum_ws_messages_total{direction=\"in\"} " + std::to_string(ws_messages_in.load()) +
         "\nfactum_ws_messages_total{direction=\"out\"} " + std::to_string(ws_messages_out.load()) +
         "\nfactum_ws_messages_total{direction=\"auto_response\"} " +
         std::to_string(ws_auto_responses.load()) + '\n';
  metric(out, "factum_ws_turn_failures_total", "counter",
         "WebSocket message turns that failed (each also an error fact).", ws_turn_failures.load());
}

std::string_view http_metrics::stream_end_label(stream_end e) {
  switch (e) {
  case stream_end::client: return "client";
  case stream_end::overflow: return "overflow";
  case stream_end::failed: return "failed";
  case stream_end::slow_reader: return "slow_reader";
  case stream_end::stopping: return "stopping";
  case stream_end::count_: break;
  }
  return "unknown";
}

void http_metrics::render_streams(std::string& out) const {
  metric(out, "factum_fact_streams", "gauge", "Open fact streams (GET .../facts/stream).",
         static_cast<uint64_t>(std::max<int64_t>(0, streams_open.load())));
  metric(out, "factum_fact_streams_accepted_total", "counter", "Fact streams started.",
         streams_accepted.load());
  header(out, "factum_fact_streams_refused_total", "counter",
         "Fact streams refused before they started, by reason.");
  out += "factum_fact_streams_refused_total{reason=\"limit\"} " +
         std::to_string(streams_refused_limit.load()) + '\n';
  header(out, "factum_fact_streams_closed_total", "counter", "Fact streams ended, by reason.");
  for (size_t i = 0; i < streams_closed_.size(); ++i) {
    out += "factum_fact_streams_closed_total{reason=\"";
    out += stream_end_label(static_cast<stream_end>(i));
    out += "\"} " + std::to_string(streams_closed_[i].load()) + '\n';
  }
  metric(out, "factum_fact_stream_events_total", "counter",
         "Fact events handed to fact streams' clients.", stream_events.load());
}

/// Long for a reason: one statement per metric, in the order /metrics lists them.
std::string http_metrics::render(const runtime_stats& rt, const cluster_stats* cluster) const {
  std::string out;
  out.reserve(8192);
  // -- HTTP --
  render_requests(out);
  header(out, "factum_http_call_duration_seconds", "histogram",
         "Time from handing a request to the runtime to its reply (after its commit).");
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds.size(); ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    out += "factum_http_call_duration_seconds_bucket{le=\"";
    out += i < bounds.size() ? fmt_double(bounds[i]) : std::string("+Inf");
    out += "\"} ";
    out += std::to_string(cumulative);
    out += '\n';
  }
  out += "factum_http_call_duration_seconds_sum " +
         fmt_double(static_cast<double>(call_ns_sum_.load(std::memory_order_relaxed)) / 1e9) + '\n';
  out += "factum_http_call_duration_seconds_count " +
         std::to_string(call_count_.load(std::memory_order_relaxed)) + '\n';
  render_syncs(out, rt);
  metric(out, "factum_http_connections", "gauge", "Open HTTP connections.",
         static_cast<uint64_t>(std::max<int64_t>(0, connections.load())));
  metric(out, "factum_http_connections_total", "counter", "HTTP connections accepted.",
         connections_total.load());
  metric(out, "factum_http_connections_refused_total", "counter",
         "HTTP connections refused at max_connections.", connections_refused.load());
  metric(out, "factum_http_in_flight_requests", "gauge", "HTTP requests read and not yet answered.",
         static_cast<uint64_t>(std::max<int64_t>(0, in_flight.load())));
  render_websockets(out);
  render_streams(out);
  // -- runtime --
  metric(out, "factum_calls_total", "counter", "Calls routed to entities.", rt.calls);
  metric(out, "factum_call_errors_total", "counter", "Calls that failed before reaching an entity.",
         rt.call_errors);
  metric(out, "factum_active_entities", "gauge", "Entities with a live actor and an open file.",
         rt.active_entities);
  metric(out, "factum_peak_active_entities", "gauge", "Most entities active at once.",
         rt.peak_active_entities);
  metric(out, "factum_activations_total", "counter", "Entity activations.", rt.activations);
  metric(out, "factum_hibernations_total", "counter", "Entity hibernations.", rt.hibernations);
  metric(out, "factum_commits_total", "counter", "SQLite commits (each one fsync in full mode).",
         rt.commits);
  metric(out, "factum_facts_total", "counter", "Facts committed.", rt.facts);
  metric(out, "factum_turns_committed_total", "counter", "Turns whose writes were committed.",
         rt.turns_committed);
  header(out, "factum_facts_per_commit", "gauge",
         "facts_total / commits_total: how much write coalescing saves.");
  out +=
    "factum_facts_per_commit " +
    fmt_double(rt.commits ? static_cast<double>(rt.facts) / static_cast<double>(rt.commits) : 0.0) +
    '\n';
  metric(out, "factum_idempotency_replays_total", "counter",
         "Calls answered from a stored idempotency record.", rt.replays);
  metric(out, "factum_idempotency_conflicts_total", "counter",
         "Calls refused because their key was in flight (409).", rt.key_conflicts);
  metric(out, "factum_idempotency_mismatches_total", "counter",
         "Calls refused because their key was used with another request (422).", rt.key_mismatches);
  metric(out, "factum_journal_steps_total", "counter",
         "Awaited steps of journaled calls started (run for real).", rt.journal_steps);
  metric(out, "factum_journal_steps_replayed_total", "counter",
         "Awaited steps of journaled calls answered from the journal by a replay.",
         rt.journal_steps_replayed);
  metric(out, "factum_journal_resumes_total", "counter",
         "Calls interrupted at an await (a crash, a retryable failure) that a retry resumed.",
         rt.journal_resumes);
  metric(out, "factum_journal_mismatches_total", "counter",
         "Replays that diverged from their journal (JOURNAL_MISMATCH, dead-lettered).",
         rt.journal_mismatches);
  metric(out, "factum_idempotency_keys_released_on_open_total", "counter",
         "Pending keys released when an entity reopened after a crash.", rt.keys_released_on_open);
  metric(out, "factum_alarm_index_rebuilds_total", "counter",
         "Damaged alarm indexes set aside and rebuilt from the entity files at start.",
         rt.alarm_index_rebuilds);
  metric(out, "factum_alarm_index_changes_total", "counter",
         "Changes of an entity's next alarm written to the alarm index.", rt.alarm_index_changes);
  metric(out, "factum_spare_files_taken_total", "counter",
         "New entities whose file was a spare made ahead.", rt.spare_files_taken);
  metric(out, "factum_spare_files_missed_total", "counter",
         "New entities that found no spare ready and made their own file.", rt.spare_files_missed);
  metric(out, "factum_spare_files_ready", "gauge", "Spare entity files ready now.",
         rt.spare_files_ready);
  metric(out, "factum_spare_file_errors_total", "counter",
         "Batches of spare files the maker failed to make (it retries each second).",
         rt.spare_file_errors);
  metric(out, "factum_alarm_index_writes_total", "counter",
         "Alarm index transactions (one sync each); concurrent changes share one.",
         rt.alarm_index_writes);
  metric(out, "factum_wal_checkpoints_total", "counter",
         "WAL checkpoints run beside a running entity.", rt.checkpoints);
  metric(out, "factum_wal_checkpoints_busy_total", "counter",
         "WAL checkpoints that found the database busy and were left to the next commit.",
         rt.checkpoints_busy);
  metric(out, "factum_wal_checkpoint_failures_total", "counter",
         "WAL checkpoints that failed with an error other than busy (the WAL keeps growing).",
         rt.checkpoint_failures);
  metric(out, "factum_alarms_fired_total", "counter", "Alarm handlers that ran.", rt.alarms_fired);
  metric(out, "factum_alarm_retries_total", "counter", "Failed alarms scheduled again.",
         rt.alarm_retries);
  metric(out, "factum_alarms_dead_lettered_total", "counter",
         "Alarms that exhausted their retries.", rt.alarms_dead_lettered);
  metric(out, "factum_alarm_lag_ms_max", "gauge", "Largest delay from due time to firing, ms.",
         rt.alarm_lag_ms_max);
  metric(out, "factum_alarm_lag_ms_sum", "counter", "Sum of delays from due time to firing, ms.",
         rt.alarm_lag_ms_sum);
  metric(out, "factum_tool_calls_total", "counter", "Resilient tool calls started.", rt.tool_calls);
  metric(out, "factum_tool_retries_total", "counter", "Tool call retries.", rt.tool_retries);
  metric(out, "factum_tool_failures_total", "counter", "Tool calls that failed in the end.",
         rt.tool_failures);
  metric(out, "factum_breaker_transitions_total", "counter", "Circuit breaker state changes.",
         rt.breaker_transitions);
  metric(out, "factum_breaker_fast_fails_total", "counter",
         "Tool calls refused by an open circuit breaker.", rt.breaker_fast_fails);
  metric(out, "factum_dead_letters_total", "counter", "Dead letters created.", rt.dead_letters);
  metric(out, "factum_quarantines_total", "counter",
         "Entities quarantined after a failed WAL sync (their unanswered calls failed 503); any "
         "is an alert: look at the disk.",
         rt.quarantines);
  metric(out, "factum_resyncs_total", "counter",
         "Entity files written again and synced before an open, after a quarantine.", rt.resyncs);
  metric(out, "factum_alarm_index_failures_total", "counter",
         "Alarm index writes that failed (the commits that needed them were refused).",
         rt.alarm_index_failures);
  metric(out, "factum_alarms_parked_total", "counter",
         "Alarm wakes that could not reach their entity, parked with a backoff.", rt.alarms_parked);
  metric(out, "factum_calls_overloaded_total", "counter",
         "Calls refused 429 ENTITY_OVERLOADED (an entity's queue was full).", rt.calls_overloaded);
  metric(out, "factum_calls_dropped_total", "counter",
         "Calls never run because their caller had been answered 504 while they waited.",
         rt.calls_dropped);
  render_tools(out, rt);
  render_outbox(out, rt);
  render_tenants(out, rt);
  if (cluster)
    render_cluster(out, rt, *cluster);
  return out;
}

// -- dead letters (the tenant index's totals) ---------------------------------------------------

std::string
http_metrics::render_dead_letters(const std::map<std::string, dead_letter_totals>& totals,
                                  const std::vector<std::string>& tenants, int64_t now_ms) {
  std::string out;
  header(out, "factum_dead_letters", "gauge",
         "Dead letters of a tenant's entities by state, as the tenant index counts them (written "
         "after each commit that changes them).");
  static const dead_letter_totals none;
  for (auto& t : tenants) {
    auto it = totals.find(t);
    auto& tt = it == totals.end() ? none : it->second;
    for (auto state : {"pending", "scheduled", "resolved", "discarded", "acknowledged"}) {
      auto n = tt.by_status.find(state);
      labeled(out, "factum_dead_letters", {{"tenant", t}, {"state", state}},
              n == tt.by_status.end() ? 0 : n->second);
    }
  }
  header(out, "factum_dead_letter_oldest_pending_seconds", "gauge",
         "Age of a tenant's oldest pending dead letter (0: none pending).");
  for (auto& t : tenants) {
    auto it = totals.find(t);
    int64_t ms = it == totals.end() || it->second.oldest_pending_ms == 0
                   ? 0
                   : std::max<int64_t>(now_ms - it->second.oldest_pending_ms, 0);
    labeled(out, "factum_dead_letter_oldest_pending_seconds", {{"tenant", t}}, ms / 1000);
  }
  return out;
}

} // namespace factum::http
