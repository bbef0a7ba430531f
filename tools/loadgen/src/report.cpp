// report.cpp: what `factum bench` prints: the result as JSON (--json), as a CSV header and row
// (--csv) or as a table, and the number formats they share with the progress line. Runs on the
// calling thread after the run; fmt_int and fmt_ns also on the progress line's thread.
#include <cstdio>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <string>

#include "bench_run.hpp"

namespace factum::tools::loadgen {

// -- formats --

std::string fmt_int(uint64_t v) {
  auto s = std::to_string(v);
  for (int i = int(s.size()) - 3; i > 0; i -= 3)
    s.insert(size_t(i), ",");
  return s;
}

std::string fmt_ns(uint64_t ns) {
  char b[32];
  if (ns < 1'000)
    std::snprintf(b, sizeof b, "%llu ns", (unsigned long long)ns);
  else if (ns < 1'000'000)
    std::snprintf(b, sizeof b, "%.0f us", double(ns) / 1e3);
  else if (ns < 1'000'000'000)
    std::snprintf(b, sizeof b, "%.2f ms", double(ns) / 1e6);
  else
    std::snprintf(b, sizeof b, "%.2f s", double(ns) / 1e9);
  return b;
}

// -- report --

json bench_run::result_json() {
  json j;
  j["workload"] = o_.workload;
  j["mode"] = o_.mode;
  j["loop"] = o_.rate > 0 ? "open" : "closed";
  j["rate_target"] = o_.rate;
  j["entities"] = entities_;
  j["concurrency"] = o_.concurrency;
  j["durability"] = o_.mode == "inproc" ? json(o_.durability) : json(nullptr);
  j["payload"] = o_.payload;
  j["seed"] = o_.seed;
  j["run_id"] = run_id_;
  if (active_cap_)
    j["active_cap"] = active_cap_;
  j["setup_s"] = setup_s_;
  j["duration_s"] = elapsed_s_;
  uint64_t done = meas_.ok + meas_.expected_failures;
  j["requests"] = meas_.sent.load();
  j["ok"] = meas_.ok.load();
  j["errors"] = meas_.errors.load();
  j["setup_errors"] = setup_.errors.load();
  j["expected_failures"] = meas_.expected_failures.load();
  j["replayed"] = meas_.replayed.load();
  j["dropped"] = meas_.dropped.load();
  j["late"] = meas_.late.load();
  j["max_send_lag_us"] = double(meas_.max_send_lag_ns.load()) / 1e3;
  j["throughput"] = elapsed_s_ > 0 ? double(done) / elapsed_s_ : 0.0;
  j["latency_us"] = {{"p50", lat_.percentile(50) / 1e3}, {"p90", lat_.percentile(90) / 1e3},
                     {"p99", lat_.percentile(99) / 1e3}, {"p99.9", lat_.percentile(99.9) / 1e3},
                     {"max", double(lat_.max()) / 1e3},  {"min", double(lat_.min()) / 1e3},
                     {"mean", lat_.mean() / 1e3},        {"count", lat_.count()}};
  if (o_.workload == "alarms")
    j["latency_is"] = "alarm lag: firing time minus due time";
  {
    std::lock_guard<std::mutex> g(meas_.mu);
    j["codes"] = meas_.codes;
    j["first_errors"] = meas_.first_errors;
  }
  if (usage_known_)
    j["server"] = {{"cpu_s", cpu_s_},
                   {"cpu_cores", elapsed_s_ > 0 ? cpu_s_ / elapsed_s_ : 0.0},
                   {"peak_rss_kib", peak_rss_kib_},
                   {"includes_client", o_.mode == "inproc"}};
  else
    j["server"] = nullptr;
  if (counters_known_)
    j["runtime"] = {
      {"activations", dc_.activations},
      {"hibernations", dc_.hibernations},
      {"commits", dc_.commits},
      {"facts", dc_.facts},
      {"facts_per_commit", dc_.commits ? double(dc_.facts) / double(dc_.commits) : 0.0},
      {"peak_active", dc_.peak_active},
      {"tool_calls", dc_.tool_calls},
      {"tool_retries", dc_.tool_retries},
      {"breaker_fast_fails", dc_.fast_fails},
      {"dead_letters", dc_.dead_letters}};
  else
    j["runtime"] = nullptr;
  if (ver_.ran)
    j["verify"] = {{"ok", ver_.ok},
                   {"entities_checked", ver_.entities_checked},
                   {"chains_ok", ver_.chains_ok},
                   {"chains_bad", ver_.chains_bad},
                   {"chains_checked", o_.mode == "inproc"},
                   {"acked", ver_.acked},
                   {"found", ver_.found},
                   {"missing", ver_.missing},
                   {"mismatched", ver_.mismatched},
                   {"duplicates", ver_.duplicates},
                   {"extra", ver_.extra},
                   {"alarms_expected", ver_.alarms_expected},
                   {"alarms_found", ver_.alarms_found},
                   {"problems", ver_.problems}};
  else
    j["verify"] = nullptr;
  return j;
}

void bench_run::report() {
  auto j = result_json();
  if (o_.json) {
    out_ << j.dump() << "\n";
    return;
  }
  auto lat = j["latency_us"];
  auto num = [](const json& v) { return v.is_null() ? std::string() : v.dump(); };
  if (o_.csv) {
    out_ << "workload,mode,loop,rate_target,entities,concurrency,durability,payload,seed,"
            "duration_s,requests,ok,errors,expected_failures,dropped,late,throughput,p50_us,"
            "p90_us,p99_us,p999_us,max_us,mean_us,cpu_s,peak_rss_kib,activations,"
            "facts_per_commit,verify_ok\n";
    auto& s = j["server"];
    auto& rt = j["runtime"];
    out_ << o_.workload << "," << o_.mode << "," << j["loop"].get<std::string>() << "," << o_.rate
         << "," << entities_ << "," << o_.concurrency << ","
         << (o_.mode == "inproc" ? o_.durability : "") << "," << o_.payload << "," << o_.seed << ","
         << elapsed_s_ << "," << meas_.sent << "," << meas_.ok << "," << meas_.errors << ","
         << meas_.expected_failures << "," << meas_.dropped << "," << meas_.late << ","
         << j["throughput"].get<double>() << "," << num(lat["p50"]) << "," << num(lat["p90"]) << ","
         << num(lat["p99"]) << "," << num(lat["p99.9"]) << "," << num(lat["max"]) << ","
         << num(lat["mean"]) << "," << (s.is_null() ? "" : num(s["cpu_s"])) << ","
         << (s.is_null() ? "" : num(s["peak_rss_kib"])) << ","
         << (rt.is_null() ? "" : num(rt["activations"])) << ","
         << (rt.is_null() ? "" : num(rt["facts_per_commit"])) << ","
         << (ver_.ran ? (ver_.ok ? "true" : "false") : "") << "\n";
    return;
  }
  auto& o = out_;
  char b[400];
  std::snprintf(b, sizeof b, "factum bench %s: %s, %s loop%s, %s entities, concurrency %d%s",
                o_.workload.c_str(), o_.mode.c_str(), o_.rate > 0 ? "open" : "closed",
                o_.rate > 0 ? (" at " + fmt_int(uint64_t(o_.rate)) + " req/s").c_str() : "",
                fmt_int(uint64_t(entities_)).c_str(), o_.concurrency,
                o_.mode == "inproc" ? (", durability " + o_.durability).c_str() : "");
  o << b << "\n";
  auto row = [&](const char* k, const std::string& v) {
    o << "  " << std::left << std::setw(14) << k << v << "\n";
  };
  std::ostringstream s;
  s << fmt_int(meas_.sent) << " in " << std::fixed << std::setprecision(2) << elapsed_s_
    << " s (setup " << setup_s_ << " s)";
  row("requests", s.str());
  s.str("");
  s << std::setprecision(0) << j["throughput"].get<double>()
    << (o_.workload == "alarms" ? " alarms/s" : " req/s") << "  ok " << fmt_int(meas_.ok)
    << "  errors " << fmt_int(meas_.errors) << "  expected failures "
    << fmt_int(meas_.expected_failures) << "  replayed " << fmt_int(meas_.replayed);
  row("rate", s.str());
  if (o_.rate > 0) {
    s.str("");
    s << "dropped " << fmt_int(meas_.dropped) << "  late (>1 ms behind schedule) "
      << fmt_int(meas_.late) << "  max send lag " << fmt_ns(meas_.max_send_lag_ns);
    row("open loop", s.str());
  }
  s.str("");
  s << "p50 " << fmt_ns(lat_.percentile(50)) << "  p90 " << fmt_ns(lat_.percentile(90)) << "  p99 "
    << fmt_ns(lat_.percentile(99)) << "  p99.9 " << fmt_ns(lat_.percentile(99.9)) << "  max "
    << fmt_ns(lat_.max()) << "  mean " << fmt_ns(uint64_t(lat_.mean()));
  row(o_.workload == "alarms" ? "alarm lag" : "latency", s.str());
  if (!meas_.codes.empty()) {
    s.str("");
    for (auto& [c, n] : meas_.codes)
      s << c << " " << fmt_int(n) << "  ";
    row("answers", s.str());
  }
  for (auto& e : meas_.first_errors)
    row("error", e);
  if (usage_known_) {
    s.str("");
    s << std::setprecision(2) << "cpu " << cpu_s_ << " s ("
      << (elapsed_s_ > 0 ? cpu_s_ / elapsed_s_ : 0) << " cores)  peak rss "
      << fmt_int(uint64_t(peak_rss_kib_)) << " KiB"
      << (o_.mode == "inproc" ? "  (in-process: includes the bench client)" : "");
    row("server", s.str());
  }
  if (counters_known_) {
    s.str("");
    s << "activations " << fmt_int(dc_.activations) << "  hibernations "
      << fmt_int(dc_.hibernations) << "  commits " << fmt_int(dc_.commits) << "  facts "
      << fmt_int(dc_.facts) << std::setprecision(1) << " ("
      << (dc_.commits ? double(dc_.facts) / double(dc_.commits) : 0) << "/commit)";
    if (dc_.tool_calls)
      s << "  tool calls " << fmt_int(dc_.tool_calls) << "  fast fails " << fmt_int(dc_.fast_fails)
        << "  dead letters " << fmt_int(dc_.dead_letters);
    row("runtime", s.str());
  }
  if (ver_.ran) {
    s.str("");
    s << (ver_.ok ? "ok: " : "FAILED: ") << fmt_int(uint64_t(ver_.found)) << " of "
      << fmt_int(uint64_t(ver_.acked)) << " acknowledged appends on disk, " << ver_.duplicates
      << " duplicates, " << ver_.extra << " unacknowledged";
    if (o_.mode == "inproc")
      s << ", " << ver_.chains_ok << " of " << ver_.entities_checked << " chains intact";
    if (ver_.alarms_expected)
      s << ", " << ver_.alarms_found << " of " << ver_.alarms_expected << " alarms fired";
    row("verification", s.str());
    for (auto& p : ver_.problems)
      row("problem", p);
  } else {
    row("verification", "skipped (--no-verify)");
  }
}

} // namespace factum::tools::loadgen
