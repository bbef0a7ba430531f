// verify_http.cpp: the verification after a `factum bench` run, that the facts equal the
// acknowledged appends: in-process through verify_local (inproc.cpp) on the stopped runtime's
// files, over HTTP through the facts route, page by page. Runs on the calling thread after the
// measured phase; sync_send's completion runs on the target's thread.
#include <future>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "bench_run.hpp"

namespace factum::tools::loadgen {

void bench_run::verify() {
  if (!o_.verify)
    return;
  int64_t allowed_extra = int64_t(meas_.unanswered.load() + setup_.unanswered.load());
  if (inproc_) {
    inproc_->stop();
    ver_ = verify_local(dir_, o_.tenant, run_id_ + "-", acks_, "bench", alarm_ids_, allowed_extra);
  } else {
    verify_http(allowed_extra);
  }
}

response bench_run::sync_send(request r) {
  std::promise<response> p;
  auto f = p.get_future();
  t_->send(std::move(r), on_answer([&p](response s) { p.set_value(std::move(s)); }));
  return f.get();
}

void bench_run::verify_http(int64_t allowed_extra) {
  ver_.ran = true;
  auto problem = [&](std::string p) {
    ver_.ok = false;
    if (ver_.problems.size() < 10)
      ver_.problems.push_back(std::move(p));
  };
  std::map<std::string, std::vector<const ack*>> by_entity;
  for (auto& a : acks_)
    by_entity[a.id].push_back(&a);
  std::string prefix = run_id_ + "-";
  int64_t on_disk = 0;
  for (auto& [id, list] : by_entity) {
    ++ver_.entities_checked;
    std::map<std::string, std::pair<int64_t, std::string>> found;
    int64_t after = 0;
    for (;;) {
      request r;
      r.read = true;
      r.type = "ledger";
      r.id = id;
      r.query = "type=bench&limit=10000&after_seq=" + std::to_string(after);
      auto s = sync_send(std::move(r));
      if (!s.ok) {
        problem("facts of " + id + ": " + std::to_string(s.status) + " " + s.code);
        break;
      }
      auto arr = json::parse(s.body, nullptr, false);
      if (!arr.is_array()) {
        problem("facts of " + id + ": not a JSON array");
        break;
      }
      for (auto& f : arr) {
        after = f.value("seq", after);
        auto k = f.value("idempotency_key", std::string());
        if (k.rfind(prefix, 0) != 0)
          continue;
        ++on_disk;
        if (!found
               .emplace(k, std::pair{f.value("seq", int64_t(0)), f.value("fact_id", std::string())})
               .second) {
          ++ver_.duplicates;
          problem("key " + k + " appended twice on " + id);
        }
      }
      // A page ends at `limit` facts or at the server's byte cap (max_facts_bytes), whichever
      // comes first; either way a full page carries a Link to the next one, and only its
      // absence means the facts are all read.
      if (!s.more || arr.empty())
        break;
    }
    for (auto* a : list) {
      ++ver_.acked;
      auto it = found.find(a->key);
      if (it == found.end()) {
        ++ver_.missing;
        problem("acknowledged key " + a->key + " on " + id + " not found");
        continue;
      }
      ++ver_.found;
      if (it->second.first != a->seq || it->second.second != a->fact_id) {
        ++ver_.mismatched;
        problem("key " + a->key + ": acknowledged seq " + std::to_string(a->seq) + ", stored seq " +
                std::to_string(it->second.first));
      }
    }
  }
  ver_.extra = on_disk - ver_.found - ver_.duplicates;
  if (ver_.extra > allowed_extra)
    problem(std::to_string(ver_.extra) + " facts of this run without an acknowledgement");
}

} // namespace factum::tools::loadgen
