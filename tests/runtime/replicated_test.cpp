// replicated_test.cpp: a runtime with a replicated log (runtime_config::replicator) against an
// in-memory log the test holds: replies wait for the log, a refused commit answers 503 and its
// entity does not serve from a file the log does not match, and a replica built from the
// records equals the owner's file.
#include <doctest/doctest.h>

#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "factum/replication/commit_record.hpp"
#include "support/runtime_helpers.hpp"
#include "support/store_helpers.hpp"
#include "support/temp_dir.hpp"
#include "support/test_entities.hpp"

using namespace std::chrono_literals;

namespace factum {
namespace replicated_test {

namespace {

/// Builds `key`'s replica under `dir` from the records of the log.
void rebuild(const std::vector<std::string>& records, const entity_key& key,
             const store_options& o) {
  std::unique_ptr<entity_store> s;
  for (auto& bytes : records) {
    auto r = replication::decode(bytes);
    REQUIRE_MESSAGE(r.is_ok(), r.error().to_string());
    if (!(r->key == key))
      continue;
    if (r->genesis) {
      REQUIRE(entity_store::create_replica(o, key, *r->genesis).is_ok());
      s = test::open_ok(o, key);
    }
    REQUIRE(s);
    auto st = s->apply_captured(r->commit);
    REQUIRE_MESSAGE(st.is_ok(), st.to_string());
  }
}

/// A log in memory. Appends are kept as encoded records; while `hold` is set, their answers
/// wait until release(); `refuse` answers every later append with UNAVAILABLE.
class memory_log : public replication::commit_sink {
 public:
  result<replication::log_tip> last_of(const entity_key& key) override {
    std::lock_guard<std::mutex> g(mu_);
    auto it = last_.find(key.to_string());
    return it == last_.end() ? replication::log_tip{} : it->second;
  }
  void append(const entity_key& key, int64_t epoch, std::optional<replica_genesis> genesis,
              std::vector<captured_commit> commits, done_fn done) override {
    std::unique_lock<std::mutex> g(mu_);
    if (refuse) {
      g.unlock();
      done(status{errc::unavailable, "the log is down"});
      return;
    }
    for (auto& c : commits) {
      replication::commit_record r{key, epoch, c, std::exchange(genesis, std::nullopt), {}};
      records_.push_back(replication::encode(r));
      last_[key.to_string()] = {c.number, c.id};
    }
    if (hold) {
      waiting_.push_back(std::move(done));
      cv_.notify_all();
      return;
    }
    g.unlock();
    done(status::ok());
  }
  status rebuild(const entity_key& key, const store_options& opts) override {
    auto path = key.file_path(opts.data_dir);
    for (auto* suffix : {"", "-wal", "-shm"})
      std::filesystem::remove(path.string() + suffix);
    ++rebuilds;
    factum::replicated_test::rebuild(records(), key, opts);
    return status::ok();
  }
  std::atomic<int> rebuilds{0};
  void compact(const entity_key& key, int64_t epoch, replica_image image, done_fn done) override {
    (void)epoch;
    {
      std::lock_guard<std::mutex> g(mu_);
      images_.emplace_back(key, std::move(image));
    }
    done(status::ok());
  }
  /// The images appended so far, oldest first.
  std::vector<std::pair<entity_key, replica_image>> images() {
    std::lock_guard<std::mutex> g(mu_);
    return images_;
  }
  /// Answers every held append ok.
  void release() {
    std::deque<done_fn> d;
    {
      std::lock_guard<std::mutex> g(mu_);
      hold = false;
      d.swap(waiting_);
    }
    for (auto& fn : d)
      fn(status::ok());
  }
  bool wait_held(size_t n) {
    std::unique_lock<std::mutex> g(mu_);
    return cv_.wait_for(g, 10s, [&] { return waiting_.size() >= n; });
  }
  std::vector<std::string> records() {
    std::lock_guard<std::mutex> g(mu_);
    return records_;
  }
  std::atomic<bool> hold{false};
  std::atomic<bool> refuse{false};

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, replication::log_tip> last_;
  std::vector<std::string> records_;
  std::vector<std::pair<entity_key, replica_image>> images_;
  std::deque<done_fn> waiting_;
};

std::unique_ptr<runtime> start(const std::filesystem::path& dir, std::shared_ptr<memory_log> log,
                               uint64_t image_min_bytes = uint64_t{1} << 20) {
  runtime_config c;
  c.data_dir = dir;
  c.alarm_poll = 100ms;
  c.replicator = std::move(log);
  c.replicated_image_min_bytes = image_min_bytes;
  test::add_test_types(c.types);
  return test::start_ok(std::move(c));
}

std::vector<std::vector<std::string>> rows(const std::filesystem::path& file,
                                           const std::string& table) {
  return test::raw_rows(file, "SELECT * FROM " + table + " ORDER BY 1");
}

} // namespace

TEST_CASE("replicated runtime: a reply waits until the log holds its commit, and the log's "
          "records rebuild the entity's file") {
  test::temp_dir dir, replica;
  auto log = std::make_shared<memory_log>();
  auto rt = start(dir.path(), log);
  entity_key k{"acme", "counter", "r1"};
  test::call_ok(*rt, k, "add", {{"by", 2}});
  log->hold = true;
  call_options o;
  o.idempotency_key = "k-1";
  std::promise<call_reply> got;
  rt->call(k, "add", R"({"by":3})", o, [&](call_reply r) { got.set_value(std::move(r)); });
  auto fut = got.get_future();
  REQUIRE(log->wait_held(1));
  // Committed and synced here, but the log has not answered: no reply yet.
  CHECK(fut.wait_for(200ms) == std::future_status::timeout);
  log->release();
  REQUIRE(fut.wait_for(10s) == std::future_status::ready);
  auto r = fut.get();
  CHECK(r.ok);
  CHECK(r.json()["value"] == 5);
  rt->stop();
  rt.reset();
  rebuild(log->records(), k, test::opts_for(replica.path()));
  auto owner_file = k.file_path(dir.path());
  auto replica_file = k.file_path(replica.path());
  CHECK(rows(owner_file, "facts").size() == 2);
  for (auto* t : {"facts", "idempotency_keys", "meta", "alarms", "owners"})
    CHECK_MESSAGE(rows(owner_file, t) == rows(replica_file, t), t);
}

TEST_CASE("replicated runtime: a commit the log refuses answers 503, and the next activation "
          "serves the entity as the log has it, its file rebuilt from the log") {
  test::temp_dir dir;
  auto log = std::make_shared<memory_log>();
  auto rt = start(dir.path(), log);
  entity_key k{"acme", "counter", "r2"};
  test::call_ok(*rt, k, "add", {{"by", 1}});
  log->refuse = true;
  auto r = rt->call_sync(k, "add", R"({"by":1})");
  CHECK_FALSE(r.ok);
  CHECK(r.http_status == 503);
  CHECK(r.retryable);
  log->refuse = false;
  // The file holds a commit the log never took: the next activation rebuilds it from the log,
  // which holds the first add only.
  auto again = test::call_ok(*rt, k, "get");
  CHECK(again["value"] == 1);
  CHECK(log->rebuilds == 1);
  CHECK(test::call_ok(*rt, k, "add", {{"by", 5}})["value"] == 6);
}

TEST_CASE("replicated runtime: once an entity's changes reach its file's size, an image of the "
          "file follows its last commit, and that image with the records after it is the "
          "owner's file") {
  test::temp_dir dir, replica;
  auto log = std::make_shared<memory_log>();
  auto rt = start(dir.path(), log, 1); // the file's size alone decides
  entity_key k{"acme", "counter", "r3"};
  auto file = k.file_path(dir.path());
  int calls = 0;
  while (log->images().empty() && calls < 5000) {
    call_options o;
    o.idempotency_key = "k-" + std::to_string(++calls);
    REQUIRE(rt->call_sync(k, "add", R"({"by":1})", o).ok);
  }
  REQUIRE(log->images().size() == 1);
  MESSAGE("first image after " << calls << " calls");
  // Changes as large as the file came first (each call writes a few hundred bytes).
  CHECK(calls > 50);
  for (int i = 0; i < 20; ++i)
    test::call_ok(*rt, k, "add", {{"by", 1}});
  CHECK(test::call_ok(*rt, k, "get")["value"] == calls + 20);
  rt->stop();
  rt.reset();
  auto [key, img] = log->images().back();
  CHECK(key == k);
  auto o = test::opts_for(replica.path());
  REQUIRE(entity_store::install_image(o, k, img).is_ok());
  std::vector<std::string> after;
  for (auto& bytes : log->records())
    if (auto r = replication::decode(bytes); r->key == k && r->commit.number > img.number)
      after.push_back(bytes);
  CHECK(after.size() >= 20);
  {
    auto s = test::open_ok(o, k);
    for (auto& bytes : after)
      REQUIRE(s->apply_captured(replication::decode(bytes)->commit).is_ok());
  }
  CHECK(test::table_rows(file) == test::table_rows(k.file_path(replica.path())));
}

} // namespace replicated_test
} // namespace factum
