// facts_cmd.cpp: `facts`, `tail` (and `facts --follow`) and `show`, local or through the HTTP
// API. Runs on the thread that parses the command line; the follow loop polls on that thread
// until its bound (--max-facts, --timeout) or SIGINT/SIGTERM.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <ostream>
#include <thread>

#include "commands.hpp"
#include "remote.hpp"

namespace factum::tools {

namespace {

// -- where facts come from ----------------------------------------------------------------------

/// Pages of facts. A local store applies every filter, order and bound itself; the HTTP API
/// applies only some (see facts_query), the rest is done here.
class fact_source {
 public:
  virtual ~fact_source() = default;
  virtual result<std::vector<fact>> page(const fact_filter& f) = 0;
  virtual bool complete_filters() const = 0;
  virtual int64_t page_size() const = 0;
  virtual status refresh() { return status::ok(); }
};

class local_source final : public fact_source {
 public:
  explicit local_source(entity_reader& r) : reader_(r) {}
  result<std::vector<fact>> page(const fact_filter& f) override { return reader_.store().query(f); }
  bool complete_filters() const override { return true; }
  int64_t page_size() const override { return 10000; }
  status refresh() override { return reader_.refresh(); }

 private:
  entity_reader& reader_;
};

class remote_source final : public fact_source {
 public:
  remote_source(const remote_api& api, entity_key key) : api_(api), key_(std::move(key)) {}
  result<std::vector<fact>> page(const fact_filter& f) override {
    auto r = api_.facts(key_, f);
    if (!r)
      return r;
    for (auto& x : *r)
      if (!x.tenant_id.empty() && x.tenant_id != key_.tenant)
        return status{errc::unavailable,
                      "the API key belongs to tenant " + x.tenant_id + ", not " + key_.tenant};
    return r;
  }
  bool complete_filters() const override { return false; }
  int64_t page_size() const override { return 1000; }

 private:
  const remote_api& api_;
  entity_key key_;
};

bool matches(const fact_filter& f, const fact& x) {
  return (f.type.empty() || x.type == f.type) && (f.subtype.empty() || x.subtype == f.subtype) &&
         (!f.since_ms || x.timestamp_ms >= *f.since_ms) &&
         (!f.until_ms || x.timestamp_ms < *f.until_ms) && (!f.after_seq || x.seq > *f.after_seq) &&
         (!f.before_seq || x.seq < *f.before_seq) &&
         (f.trace_id.empty() || x.trace_id == f.trace_id) &&
         (f.tool_id.empty() || x.tool_id == f.tool_id) &&
         (f.idempotency_key.empty() || x.idempotency_key == f.idempotency_key);
}

/// The part of `f` the HTTP API understands, oldest first.
fact_filter server_part(const fact_filter& f, int64_t page) {
  fact_filter s = f;
  s.tool_id.clear();
  s.idempotency_key.clear();
  s.before_seq.reset();
  s.newest_first = false;
  s.limit = page;
  return s;
}

/// Facts matching `spec`, at most `limit` (0: all), oldest first or newest first.
result<std::vector<fact>> collect(fact_source& src, const fact_filter& spec, int64_t limit,
                                  bool newest) {
  std::vector<fact> out;
  if (src.complete_filters()) {
    fact_filter f = spec;
    f.newest_first = newest;
    while (true) {
      int64_t remaining = limit == 0 ? src.page_size() : limit - static_cast<int64_t>(out.size());
      f.limit = std::min(src.page_size(), remaining);
      auto p = src.page(f);
      if (!p)
        return p.error();
      out.insert(out.end(), p->begin(), p->end());
      if (static_cast<int64_t>(p->size()) < f.limit ||
          (limit != 0 && static_cast<int64_t>(out.size()) >= limit))
        break;
      if (newest)
        f.before_seq = p->back().seq;
      else
        f.after_seq = p->back().seq;
    }
    return out;
  }
  std::deque<fact> ring; // newest first: the last `limit` matches of an ascending walk
  fact_filter f = server_part(spec, src.page_size());
  // When the server applies every filter, ask for no more than is still wanted.
  bool exact = !newest && limit != 0 && spec.tool_id.empty() && spec.idempotency_key.empty() &&
               !spec.before_seq;
  while (true) {
    if (exact)
      f.limit = std::min(src.page_size(), limit - static_cast<int64_t>(out.size()));
    auto p = src.page(f);
    if (!p)
      return p.error();
    int64_t last = f.after_seq.value_or(0);
    for (auto& x : *p) {
      if (x.seq <= last)
        return status{errc::unavailable, "server sent facts out of seq order (after_seq " +
                                           std::to_string(f.after_seq.value_or(0)) + ")"};
      last = x.seq;
      if (!matches(spec, x))
        continue;
      if (newest) {
        ring.push_back(x);
        if (limit != 0 && static_cast<int64_t>(ring.size()) > limit)
          ring.pop_front();
      } else {
        out.push_back(x);
        if (limit != 0 && static_cast<int64_t>(out.size()) >= limit)
          return out;
      }
    }
    if (static_cast<int64_t>(p->size()) < f.limit)
      break;
    if (spec.before_seq && last >= *spec.before_seq - 1)
      break;
    f.after_seq = last;
  }
  if (newest)
    out.assign(ring.rbegin(), ring.rend());
  return out;
}

// -- printing -----------------------------------------------------------------------------------

/// The DATA cell of a fact: its data cut at 60 characters. An error fact's `error_code` comes
/// first and whole (its key sorts after others, which would push it past the cut).
std::string data_cell(const fact& f) {
  constexpr size_t width = 60;
  if (f.type == "error") {
    auto d = nlohmann::json::parse(f.data, nullptr, false);
    auto code = d.is_object() ? d.find("error_code") : d.end();
    if (d.is_object() && code != d.end() && code->is_string()) {
      auto dump = [](const nlohmann::json& v) {
        return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      };
      auto head = "{\"error_code\":" + dump(*code);
      d.erase(code);
      auto rest = d.empty() ? std::string("}") : "," + dump(d).substr(1);
      return ellipsize(head + rest, std::max(width, display_width(head) + 4));
    }
  }
  return ellipsize(f.data, width);
}

/// Prints facts as JSON lines, an aligned table, or (follow) fixed-width rows.
class fact_printer {
 public:
  fact_printer(const run_ctx& ctx, bool streaming)
      : ctx_(ctx), streaming_(streaming), table_({{"SEQ", true},
                                                  {"TIME"},
                                                  {"TYPE"},
                                                  {"SUBTYPE"},
                                                  {"TOOL"},
                                                  {"AMOUNT", true},
                                                  {"TRACE"},
                                                  {"DATA"}}) {}

  void add(const fact& f) {
    if (ctx_.json) {
      ctx_.out << to_json_text(f) << '\n';
      return;
    }
    std::vector<std::string> cells{std::to_string(f.seq),
                                   ctx_.time(f.timestamp_ms),
                                   f.type,
                                   or_dash(f.subtype),
                                   or_dash(f.tool_id),
                                   f.amount.empty() ? "-" : f.amount + " " + f.currency,
                                   or_dash(ellipsize(f.trace_id, 24)),
                                   data_cell(f)};
    std::vector<std::string> styled;
    if (f.type == "error") {
      styled.resize(cells.size());
      styled[2] = ctx_.red(f.type);
    }
    table_.add(std::move(cells), std::move(styled));
    if (streaming_) {
      if (!header_done_) {
        table_.print_header(ctx_, widths());
        header_done_ = true;
      }
      table_.print_row(ctx_, widths(), 0);
      table_.clear();
    }
  }

  /// Ends a batch: prints the table (non-streaming) and flushes.
  void flush() {
    if (!ctx_.json && !streaming_)
      table_.print(ctx_);
    if (!ctx_.json && streaming_ && !header_done_) {
      table_.print_header(ctx_, widths());
      header_done_ = true;
    }
    ctx_.out.flush();
  }

 private:
  std::vector<size_t> widths() const {
    return {6, ctx_.local_time ? 29u : 24u, 10, 12, 10, 12, 16, 0};
  }
  const run_ctx& ctx_;
  bool streaming_;
  bool header_done_ = false;
  text_table table_;
};

// -- follow -------------------------------------------------------------------------------------

std::atomic<bool> interrupted{false};

extern "C" void on_stop_signal(int) {
  interrupted.store(true);
}

/// Installs SIGINT/SIGTERM handlers for the life of a follow loop, then restores the old ones.
class stop_signals {
 public:
  stop_signals() {
    interrupted.store(false);
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~stop_signals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  stop_signals(const stop_signals&) = delete;
  stop_signals& operator=(const stop_signals&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

/// Polls for facts after `after_seq` until a bound is reached. Returns an exit code.
int follow(const run_ctx& ctx, fact_source& src, const fact_filter& spec, int64_t after_seq,
           const fact_options& o, fact_printer& printer) {
  using clock = std::chrono::steady_clock;
  stop_signals signals;
  auto start = clock::now();
  auto deadline = o.timeout_s > 0
                    ? start + std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000))
                    : clock::time_point::max();
  auto interval = std::chrono::milliseconds(std::max<int64_t>(o.interval_ms, 1));
  int64_t printed = 0;
  for (int64_t poll = 0;; ++poll) {
    if (interrupted.load() || (o.max_facts > 0 && printed >= o.max_facts))
      break;
    if (poll > 0) {
      auto now = clock::now();
      if (now >= deadline)
        break;
      std::this_thread::sleep_for(std::min<clock::duration>(interval, deadline - now));
      if (interrupted.load())
        break;
    }
    if (auto st = src.refresh(); !st)
      return ctx.fail(st);
    fact_filter f = spec;
    f.after_seq = after_seq;
    // Only what is new since the last poll; a large backlog arrives over several polls.
    auto batch = collect(src, f, src.page_size(), false);
    if (!batch)
      return ctx.fail(batch.error());
    for (auto& x : *batch) {
      if (o.max_facts > 0 && printed >= o.max_facts)
        break;
      printer.add(x);
      after_seq = std::max(after_seq, x.seq);
      ++printed;
    }
    printer.flush();
    if (ctx.on_poll)
      ctx.on_poll(poll);
    if (clock::now() >= deadline)
      break;
  }
  return exit_ok;
}

/// The newest seq matching `spec` (0 when none).
result<int64_t> newest_seq(fact_source& src, const fact_filter& spec) {
  auto r = collect(src, spec, 1, true);
  if (!r)
    return r.error();
  return r->empty() ? int64_t{0} : r->front().seq;
}

} // namespace

int run_facts(const run_ctx& ctx, const common_options& c, const std::string& entity,
              const fact_options& o, bool tail) {
  auto key = parse_entity(entity);
  if (!key)
    return ctx.fail(key.error());
  auto spec = make_filter(ctx, o);
  if (!spec)
    return ctx.fail(spec.error());
  bool following = tail || o.follow;
  if (o.limit < 0 || o.lines < 0 || o.max_facts < 0 || o.timeout_s < 0 || o.interval_ms < 1)
    return ctx.fail(exit_usage, "--limit, --lines, --max-facts and --timeout must not be "
                                "negative; --interval must be at least 1 ms");
  if (following && o.newest)
    return ctx.fail(exit_usage, "--newest cannot be combined with following (--follow, tail)");

  std::unique_ptr<entity_reader> reader;
  std::optional<remote_api> api;
  std::unique_ptr<fact_source> src;
  if (!c.server.empty()) {
    if (!c.data.empty())
      return ctx.fail(exit_usage, "--data and --server exclude each other");
    auto a =
      remote_api::make(c.server, c.api_key,
                       std::chrono::milliseconds(static_cast<int64_t>(c.http_timeout_s * 1000)));
    if (!a)
      return ctx.fail(a.error());
    api.emplace(std::move(*a));
    src = std::make_unique<remote_source>(*api, *key);
  } else {
    if (c.data.empty())
      return ctx.fail(exit_usage, "--data DIR is required (or --server URL)");
    auto r = entity_reader::open(c.data, *key);
    if (!r)
      return ctx.fail(r.error());
    reader = std::move(*r);
    src = std::make_unique<local_source>(*reader);
  }

  fact_printer printer(ctx, following);
  // The backlog: tail prints the last --lines facts (or all after --after-seq), facts its list.
  result<std::vector<fact>> backlog = std::vector<fact>{};
  if (tail && !spec->after_seq) {
    if (o.lines > 0)
      backlog = collect(*src, *spec, o.lines, true);
    if (backlog)
      std::reverse(backlog->begin(), backlog->end());
  } else if (tail) {
    backlog = collect(*src, *spec, 0, false);
  } else {
    backlog = collect(*src, *spec, o.limit, o.newest);
  }
  if (!backlog)
    return ctx.fail(backlog.error());
  for (auto& x : *backlog)
    printer.add(x);
  printer.flush();
  if (!following)
    return exit_ok;

  // Follow from the end of what was printed; unless tail --after-seq printed everything, from
  // the end of the log (facts --follow prints only --limit of it).
  int64_t after = spec->after_seq.value_or(0);
  for (auto& x : *backlog)
    after = std::max(after, x.seq);
  if (!(tail && spec->after_seq)) {
    auto n = newest_seq(*src, *spec);
    if (!n)
      return ctx.fail(n.error());
    after = std::max(after, *n);
  }
  return follow(ctx, *src, *spec, after, o, printer);
}

int run_show(const run_ctx& ctx, const common_options& c, const std::string& entity,
             const std::string& which) {
  if (int rc = require_local(ctx, c, "show"))
    return rc;
  auto key = parse_entity(entity);
  if (!key)
    return ctx.fail(key.error());
  auto r = entity_reader::open(c.data, *key);
  if (!r)
    return ctx.fail(r.error());
  auto& store = (*r)->store();
  bool by_seq = !which.empty() && which.find_first_not_of("0123456789") == std::string::npos;
  result<fact> f = by_seq ? store.get(parse_count(which, "seq").value()) : store.get(which);
  if (!f) {
    if (f.error().code() == errc::not_found)
      return ctx.fail(exit_no_entity, f.error().message() + " in " + key->to_string());
    return ctx.fail(f.error());
  }
  bool hash_ok = compute_hash(*f) == f->hash;
  if (ctx.json) {
    ctx.out << to_json_text(*f) << '\n';
    return exit_ok;
  }
  auto line = [&](const char* name, const std::string& value) {
    if (value.empty())
      return;
    std::string label = std::string(name) + ":";
    label.resize(std::max<size_t>(label.size(), 17), ' ');
    ctx.out << ctx.bold(label) << value << '\n';
  };
  line("seq", std::to_string(f->seq));
  line("fact_id", f->fact_id);
  line("type", f->type);
  line("subtype", f->subtype);
  line("time", ctx.time(f->timestamp_ms));
  line("timestamp", std::to_string(f->timestamp_ms));
  line("entity", f->tenant_id + "/" + f->entity_type + "/" + f->entity_id);
  line("tool_id", f->tool_id);
  line("config", f->config_id.empty() ? std::string()
                                      : f->config_id + " v" + std::to_string(f->config_version));
  line("trace_id", f->trace_id);
  line("idempotency_key", f->idempotency_key);
  line("amount", f->amount.empty() ? std::string() : f->amount + " " + f->currency);
  line("from_entity", f->from_entity);
  line("to_entity", f->to_entity);
  line("prev_hash", f->prev_hash);
  line("hash", f->hash);
  line("hash check", hash_ok ? ctx.green("ok") : ctx.red("MISMATCH (the row was altered)"));
  auto data = nlohmann::json::parse(f->data, nullptr, false);
  ctx.out << ctx.bold("data:") << '\n';
  std::string pretty = data.is_discarded() ? f->data : data.dump(2);
  size_t start = 0;
  while (start <= pretty.size()) {
    auto nl = pretty.find('\n', start);
    ctx.out << "  " << pretty.substr(start, nl - start) << '\n';
    if (nl == std::string::npos)
      break;
    start = nl + 1;
  }
  return exit_ok;
}

} // namespace factum::tools
