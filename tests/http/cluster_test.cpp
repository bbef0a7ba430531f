// cluster_test.cpp: cluster mode's gateway and runtime parts without etcd: a scripted
// cluster_router and entity_ownership stand in for a cluster node, so each decision is the
// test's. Two real in-process servers: a request to one is relayed to the other (the owner),
// NOT_OWNER answers make the relaying node wait (reads of the cluster's state with backoff) for
// a new placement and never reach the client, a settling shard's request waits until it is
// served, a shard without a live owner answers 503 and writes nothing, an activation the
// cluster refuses creates no file, and a commit the cluster no longer allows is fenced (503,
// nothing committed). Runs on the test thread; the routers are called from the servers' I/O
// threads.
#include <doctest/doctest.h>

#include <atomic>
#include <mutex>

#include "factum/storage/sha256.hpp"
#include "http/cutting_proxy.hpp"
#include "http/fixture.hpp"
#include "http/scripted_cluster.hpp"

using namespace factum;
using namespace factum::test;
using nlohmann::json;

namespace {

std::string append_path(const std::string& id) {
  return "/v1/entities/ledger/" + id + "/append";
}

const std::string body = R"({"type":"invocation","data":{"x":1}})";

} // namespace

TEST_CASE("cluster: a request is relayed to the owner node, and the owner serves it as its own") {
  auto owner_c = std::make_shared<scripted_cluster>();
  owner_c->when_forwarded = local_route();
  gateway_fixture owner(with_cluster(owner_c));
  auto front_c = std::make_shared<scripted_cluster>();
  front_c->next = forward_route(owner.port(), 7);
  front_c->epoch = 0; // the front node owns nothing
  gateway_fixture front(with_cluster(front_c));

  http_client c(front.port());
  auto r = c.request("POST", append_path("r1"), json_headers(acme_key, "k-1"), body);
  REQUIRE_MESSAGE(r.status == 200, r.body);
  CHECK(r.json()["seq"] == 1);
  CHECK(owner_c->forwarded_routes == 1);
  CHECK(owner.entity_files() == 1);
  CHECK(front.entity_files() == 0);
  // A retry with the same key through the front is a replay at the owner.
  auto again = c.request("POST", append_path("r1"), json_headers(acme_key, "k-1"), body);
  CHECK(again.status == 200);
  CHECK(again.header("idempotent-replayed") == "true");
  CHECK(again.json() == r.json());
  // Reads are relayed too.
  auto facts = c.request("GET", "/v1/entities/ledger/r1/facts?limit=1", json_headers());
  CHECK(facts.status == 200);
  CHECK(facts.json().size() == 1);
  // Errors of the owner come back as they are.
  auto bad = c.request("POST", append_path("r1"), json_headers(acme_key, "k-1"), "{}");
  CHECK(bad.status == 422);
  auto metrics = c.request("GET", "/metrics").body;
  CHECK(metrics.find("factum_cluster_forwarded_total{outcome=\"ok\"} 4") != std::string::npos);
  CHECK(metrics.find("\nfactum_cluster_shards_owned 3\n") != std::string::npos);
}

TEST_CASE("cluster: a relayed call whose owner committed it and died before its reply is never "
          "sent again without an Idempotency-Key (502 OUTCOME_UNKNOWN, run once), and with a key "
          "it is sent again and replayed") {
  // ledger.append without a key, as a type that does not require one takes its calls.
  auto keyless = [](const std::shared_ptr<scripted_cluster>& c) -> gateway_fixture::tweak {
    return [c](runtime_config& rc, http_server_config& hc) {
      with_cluster(c)(rc, hc);
      hc.require_idempotency_key.clear();
    };
  };
  auto owner_c = std::make_shared<scripted_cluster>();
  owner_c->when_forwarded = local_route();
  gateway_fixture owner(keyless(owner_c));
  cutting_proxy proxy(owner.port(), {2, 4}); // the owner's answers to these never leave
  auto front_c = std::make_shared<scripted_cluster>();
  front_c->next = forward_route(proxy.port(), 7);
  front_c->epoch = 0;
  gateway_fixture front(keyless(front_c));

  http_client c(front.port());
  auto first = c.request("POST", append_path("o1"), json_headers(), body);
  REQUIRE_MESSAGE(first.status == 200, first.body); // leaves a kept-alive connection to reuse
  // The owner runs the second and its answer is lost on the reused connection.
  auto lost = c.request("POST", append_path("o1"), json_headers(), body);
  CHECK(lost.status == 502);
  CHECK(lost.code() == "OUTCOME_UNKNOWN");
  CHECK(proxy.requests() == 2); // not sent again
  http_client at_owner(owner.port());
  auto facts = at_owner.request("GET", "/v1/entities/ledger/o1/facts?limit=10", json_headers());
  CHECK(facts.json().size() == 2); // the lost one ran once
  // With a key, the relay sends it again and the owner replays it.
  auto read = c.request("GET", "/v1/entities/ledger/o1/facts?limit=10", json_headers());
  CHECK(read.status == 200); // the third request: a kept-alive connection again
  auto keyed = c.request("POST", append_path("o1"), json_headers(acme_key, "k-lost"), body);
  CHECK(keyed.status == 200);
  CHECK(keyed.header("idempotent-replayed") == "true");
  CHECK(proxy.requests() == 5);
  facts = at_owner.request("GET", "/v1/entities/ledger/o1/facts?limit=10", json_headers());
  CHECK(facts.json().size() == 3);
}

TEST_CASE("cluster: an owner that keeps saying NOT_OWNER while the placement stays the same makes "
          "the relaying node read the state again with a growing backoff for 2 s, without "
          "sending it there again, and the client sees 503 SHARD_UNAVAILABLE, never NOT_OWNER") {
  auto owner_c = std::make_shared<scripted_cluster>();
  owner_c->when_forwarded = not_owner_route("scripted");
  gateway_fixture owner(with_cluster(owner_c));
  auto front_c = std::make_shared<scripted_cluster>();
  front_c->next = forward_route(owner.port());
  gateway_fixture front(with_cluster(front_c));

  http_client c(front.port());
  auto t0 = std::chrono::steady_clock::now();
  auto r = c.request("POST", append_path("n1"), json_headers(acme_key, "k-1"), body);
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK(r.status == 503);
  CHECK(r.code() == "SHARD_UNAVAILABLE");
  CHECK(r.header("retry-after") == "1");
  CHECK(r.header("x-factum-not-owner").empty());
  CHECK(owner_c->forwarded_routes == 1); // the same placement is not tried again
  CHECK(took >= std::chrono::milliseconds(1'900));
  CHECK(took < std::chrono::seconds(10));
  std::vector<std::chrono::steady_clock::time_point> at;
  {
    std::lock_guard<std::mutex> g(front_c->mu);
    at = front_c->refreshed_at;
  }
  // At once, then after 25, 50, 100, 200 and 400 ms (400 from then on) until 2 s: about ten
  // reads, each after the backoff (only the last may be shortened to the deadline).
  REQUIRE(at.size() >= 5);
  CHECK(at.size() <= 12);
  CHECK(at.back() - at.front() >= std::chrono::milliseconds(1'800));
  for (size_t i = 1; i + 1 < at.size() && i <= 5; ++i)
    CHECK_MESSAGE(at[i] - at[i - 1] >=
                    std::chrono::milliseconds(25 << (i - 1)) - std::chrono::milliseconds(2),
                  "read " << i);
  CHECK(owner.entity_files() == 0);
  CHECK(front.entity_files() == 0);
}

TEST_CASE("cluster: a NOT_OWNER while the shard changes hands makes the relaying node wait, with "
          "backoff, until a read of the cluster's state shows the new owner, and the client gets "
          "the new owner's 200") {
  auto old_c = std::make_shared<scripted_cluster>();
  old_c->when_forwarded = not_owner_route("scripted: moved away");
  gateway_fixture old_owner(with_cluster(old_c));
  auto new_c = std::make_shared<scripted_cluster>();
  new_c->when_forwarded = local_route();
  gateway_fixture new_owner(with_cluster(new_c));
  auto front_c = std::make_shared<scripted_cluster>();
  front_c->epoch = 0;
  front_c->next = forward_route(old_owner.port(), 7);
  // The new owner shows in the fourth read of the state (the first three show the old one).
  front_c->switch_at = 4;
  front_c->switched.to = shard_route::where::forward;
  front_c->switched.address = "127.0.0.1:" + std::to_string(new_owner.port());
  front_c->switched.epoch = 9;
  gateway_fixture front(with_cluster(front_c));

  http_client c(front.port());
  auto r = c.request("POST", append_path("m1"), json_headers(acme_key, "k-1"), body);
  REQUIRE_MESSAGE(r.status == 200, r.body);
  CHECK(r.json()["seq"] == 1);
  CHECK(old_c->forwarded_routes == 1);
  CHECK(new_c->forwarded_routes == 1);
  CHECK(front_c->refreshes == 4);
  std::vector<std::chrono::steady_clock::time_point> at;
  {
    std::lock_guard<std::mutex> g(front_c->mu);
    at = front_c->refreshed_at;
  }
  REQUIRE(at.size() == 4);
  // Reads at once, then 25, 50 and 100 ms apart: never three tries within a few ms.
  CHECK(at[3] - at[0] >= std::chrono::milliseconds(170));
  CHECK(new_owner.entity_files() == 1);
  CHECK(old_owner.entity_files() == 0);
  auto metrics = c.request("GET", "/metrics").body;
  CHECK(metrics.find("factum_cluster_forwarded_total{outcome=\"not_owner\"} 1") !=
        std::string::npos);
}

TEST_CASE("cluster: a client's request for a shard that is settling (moving) waits until it is "
          "served, and a relayed one is answered at once") {
  auto cl = std::make_shared<scripted_cluster>();
  cl->next.to = shard_route::where::unavailable;
  cl->next.code = "SHARD_UNAVAILABLE";
  cl->next.detail = "scripted: moving";
  cl->next.settling = true;
  cl->switch_at = 3; // the move ends: the third read of the state finds the shard served here
  cl->switched = local_route();
  cl->when_forwarded = not_owner_route("scripted: moving");
  gateway_fixture f(with_cluster(cl));
  http_client c(f.port());
  auto h = json_headers(acme_key, "k-r");
  h.emplace_back("X-Factum-Forwarded", "7");
  auto relayed = c.request("POST", append_path("s1"), h, body);
  CHECK(relayed.status == 503);
  CHECK(relayed.code() == "NOT_OWNER");
  CHECK(cl->refreshes == 0); // its relaying node is the one that waits
  auto r = c.request("POST", append_path("s1"), json_headers(acme_key, "k-1"), body);
  REQUIRE_MESSAGE(r.status == 200, r.body);
  CHECK(cl->refreshes == 3);
  CHECK(f.entity_files() == 1);
}

TEST_CASE("cluster: a shard without a live owner answers 503 with Retry-After and writes "
          "nothing, and /healthz and GET /v1/cluster say what the cluster says") {
  auto cl = std::make_shared<scripted_cluster>();
  cl->next.to = shard_route::where::unavailable;
  cl->next.code = "SHARD_UNAVAILABLE";
  cl->next.detail = "its home node is down";
  cl->next.retry_after_ms = 2500;
  gateway_fixture f(with_cluster(cl));
  http_client c(f.port());
  auto r = c.request("POST", append_path("u1"), json_headers(acme_key, "k-1"), body);
  CHECK(r.status == 503);
  CHECK(r.code() == "SHARD_UNAVAILABLE");
  CHECK(r.header("retry-after") == "3");
  CHECK(f.entity_files() == 0);
  // Authentication and validation come first: a bad key is 401, not 503.
  auto unauth = c.request("POST", append_path("u1"), json_headers("nope", "k-1"), body);
  CHECK(unauth.status == 401);

  auto view = c.request("GET", "/v1/cluster", {{"X-API-Key", acme_key}});
  CHECK(view.status == 200);
  CHECK(view.json() == json{{"cluster", "scripted"}});
  CHECK(c.request("GET", "/v1/cluster").status == 401);
  CHECK(c.request("GET", "/healthz").json() == json{{"status", "ok"}, {"lease", "live"}});
  cl->lease_live = false;
  auto h = c.request("GET", "/healthz");
  CHECK(h.status == 503);
  CHECK(h.code() == "CLUSTER_UNAVAILABLE");
}

TEST_CASE("cluster: without a cluster, GET /v1/cluster is 404 NOT_CLUSTERED and a client's "
          "X-Factum-Forwarded header changes nothing") {
  gateway_fixture f;
  http_client c(f.port());
  auto r = c.request("GET", "/v1/cluster", {{"X-API-Key", acme_key}});
  CHECK(r.status == 404);
  CHECK(r.code() == "NOT_CLUSTERED");
  auto h = json_headers(acme_key, "k-1");
  h.emplace_back("X-Factum-Forwarded", "99");
  auto w = c.request("POST", append_path("s1"), h, body);
  CHECK(w.status == 200);
}

TEST_CASE("cluster: an activation the cluster refuses creates no file, and a relayed request "
          "for it answers NOT_OWNER to the relaying node") {
  auto cl = std::make_shared<scripted_cluster>();
  cl->next = local_route();
  cl->when_forwarded = local_route();
  cl->epoch = 0; // routed here, but the ownership check at activation says no
  gateway_fixture f(with_cluster(cl));
  http_client c(f.port());
  auto r = c.request("POST", append_path("a1"), json_headers(acme_key, "k-1"), body);
  CHECK(r.status == 503);
  CHECK(r.code() == "SHARD_UNAVAILABLE");
  CHECK(f.entity_files() == 0);
  auto h = json_headers(acme_key, "k-1");
  h.emplace_back("X-Factum-Forwarded", "7");
  auto fwd = c.request("POST", append_path("a1"), h, body);
  CHECK(fwd.status == 503);
  CHECK(fwd.code() == "NOT_OWNER");
  CHECK(fwd.header("x-factum-not-owner") == "1");
  CHECK(f.rt().metrics().value("factum_cluster_activations_refused_total") >= 2);
  // Once the cluster says yes, the same key runs (nothing of it was recorded).
  cl->epoch = 7;
  auto ok = c.request("POST", append_path("a1"), json_headers(acme_key, "k-1"), body);
  CHECK(ok.status == 200);
  CHECK(ok.header("idempotent-replayed").empty());
}

TEST_CASE("cluster: a commit the cluster no longer allows is fenced: 503, nothing of the batch "
          "on disk, the entity closes, and the key runs again once the node owns it") {
  auto cl = std::make_shared<scripted_cluster>();
  cl->next = local_route();
  gateway_fixture f(with_cluster(cl));
  http_client c(f.port());
  REQUIRE(c.request("POST", append_path("f1"), json_headers(acme_key, "k-0"), body).status == 200);
  cl->commits_allowed = false; // e.g. the lease ran out while the entity was active
  auto r = c.request("POST", append_path("f1"), json_headers(acme_key, "k-1"), body);
  CHECK(r.status == 503);
  CHECK(r.code() == "SHARD_UNAVAILABLE");
  CHECK(f.rt().metrics().value("factum_cluster_fenced_writes_total") >= 1);
  cl->commits_allowed = true;
  cl->epoch = 8; // taken again under a new epoch: the next activation claims it
  auto ok = c.request("POST", append_path("f1"), json_headers(acme_key, "k-1"), body);
  REQUIRE_MESSAGE(ok.status == 200, ok.body);
  CHECK(ok.header("idempotent-replayed").empty());
  auto facts = f.facts("acme", "ledger", "f1", {{"type", "invocation"}});
  CHECK(facts.size() == 2); // k-0 and k-1 once each
  auto metrics = c.request("GET", "/metrics").body;
  CHECK(metrics.find("factum_cluster_fenced_writes_total 0") == std::string::npos);
}

TEST_CASE("cluster: GET /v1/entities lists the tenant's entities of every node, merged in order "
          "(an entity on two nodes once) and paged across nodes, and refuses (503) while a node "
          "that holds entities is down") {
  auto b_c = std::make_shared<scripted_cluster>();
  gateway_fixture b(with_cluster(b_c));
  auto a_c = std::make_shared<scripted_cluster>();
  a_c->peer_addresses = {"127.0.0.1:" + std::to_string(b.port())};
  gateway_fixture a(with_cluster(a_c));
  http_client ca(a.port()), cb(b.port());
  int k = 0;
  // e3 is on both nodes, as an entity is for a moment while its shard moves: listed once.
  for (auto id : {"e1", "e3", "e4", "e5"})
    REQUIRE(
      ca.request("POST", append_path(id), json_headers(acme_key, "k" + std::to_string(k++)), body)
        .status == 200);
  for (auto id : {"e2", "e3", "e6"})
    REQUIRE(
      cb.request("POST", append_path(id), json_headers(acme_key, "k" + std::to_string(k++)), body)
        .status == 200);
  // globex's entity on b is not acme's.
  REQUIRE(cb.request("POST", append_path("g1"), json_headers(globex_key, "g"), body).status == 200);

  auto all = ca.request("GET", "/v1/entities", {{"X-API-Key", acme_key}});
  REQUIRE_MESSAGE(all.status == 200, all.body);
  std::vector<std::string> ids;
  for (auto& e : all.json())
    ids.push_back(e["id"].get<std::string>());
  CHECK(ids == std::vector<std::string>{"e1", "e2", "e3", "e4", "e5", "e6"});
  CHECK(all.header("link").empty());

  // Pages of two follow the Link across both nodes, each entity once.
  std::vector<std::string> paged;
  std::string target = "/v1/entities?limit=2";
  for (int pages = 0; !target.empty() && pages < 10; ++pages) {
    auto r = ca.request("GET", target, {{"X-API-Key", acme_key}});
    REQUIRE_MESSAGE(r.status == 200, r.body);
    for (auto& e : r.json())
      paged.push_back(e["id"].get<std::string>());
    auto link = r.header("link");
    target = link.empty() ? "" : link.substr(1, link.find('>') - 1);
  }
  CHECK(paged == ids);

  // A relayed listing answers with the node's own entities only.
  auto h = header_list{{"X-API-Key", acme_key}, {"X-Factum-Forwarded", "0"}};
  CHECK(cb.request("GET", "/v1/entities", h).json().size() == 3);

  {
    std::lock_guard<std::mutex> g(a_c->mu);
    a_c->down_nodes = {"n9"};
  }
  auto down = ca.request("GET", "/v1/entities", {{"X-API-Key", acme_key}});
  CHECK(down.status == 503);
  CHECK(down.code() == "SHARD_UNAVAILABLE");
  CHECK(down.header("retry-after") == "1");
  {
    std::lock_guard<std::mutex> g(a_c->mu);
    a_c->down_nodes.clear();
  }
  b.stop(); // a peer that does not answer: the listing would be incomplete
  auto gone = ca.request("GET", "/v1/entities", {{"X-API-Key", acme_key}});
  CHECK(gone.status == 503);
  CHECK(gone.code() == "SHARD_UNAVAILABLE");
}

namespace {

/// PUT of one shard move's file, signed with `secret` as a node signs it.
http_reply put_move(uint16_t port, const entity_key& k, int64_t epoch, const std::string& bytes,
                    const std::string& secret, std::string sha = {}) {
  http_client c(port);
  auto target = "/v1/cluster/moves/3/" + k.tenant + "/" + k.type + "/" + k.id;
  auto e = std::to_string(epoch);
  if (sha.empty())
    sha = sha256_hex(bytes);
  std::string time_ms = "1790000000000";
  auto sig = move_signature(secret, {target, e, sha, time_ms, {}});
  return c.request("PUT", target,
                   {{"Content-Type", "application/octet-stream"},
                    {"X-Factum-Move-Epoch", e},
                    {"X-Factum-Content-Sha256", sha},
                    {"X-Factum-Move-Time", time_ms},
                    {"X-Factum-Move-Signature", sig}},
                   bytes);
}

} // namespace

TEST_CASE("cluster: a shard move's file is taken only with the cluster's secret, a matching "
          "checksum and a move the node accepts, and the entity then serves its facts here") {
  auto src_c = std::make_shared<scripted_cluster>();
  src_c->next = local_route();
  gateway_fixture src(with_cluster(src_c));
  http_client sc(src.port());
  for (int i = 0; i < 3; ++i)
    REQUIRE(
      sc.request("POST", append_path("mv"), json_headers(acme_key, "k-" + std::to_string(i)), body)
        .status == 200);
  entity_key key{"acme", "ledger", "mv"};
  REQUIRE(src.rt().release_entities([&](const entity_key& k) { return k == key; },
                                    std::chrono::seconds(10)) == 0);
  auto bytes = src.rt().export_entity(key, 9, "n-src"); // the move's epoch 9 > the owner's 7
  REQUIRE_MESSAGE(bytes.is_ok(), bytes.error().to_string());

  auto dst_c = std::make_shared<scripted_cluster>();
  dst_c->next = local_route();
  dst_c->epoch = 12; // the new home's epoch, after the move's
  // Bodies above 4 KiB (this file is ~30 KiB) are read only for the move route with the secret.
  gateway_fixture dst([&](runtime_config& rc, http_server_config& hc) {
    with_cluster(dst_c)(rc, hc);
    hc.limits.max_body_bytes = 4096;
    hc.limits.max_move_file_bytes = 1 << 20;
  });
  REQUIRE(bytes->size() > 4096);
  auto no_secret = put_move(dst.port(), key, 9, *bytes, "wrong-secret-0123456");
  CHECK(no_secret.status == 413);
  CHECK(no_secret.code() == "BODY_TOO_LARGE");
  auto small = put_move(dst.port(), key, 9, "x", "wrong-secret-0123456");
  CHECK(small.status == 401);
  CHECK(small.code() == "CLUSTER_SECRET_INVALID");
  auto bad_sum = put_move(dst.port(), key, 9, *bytes, dst_c->secret, std::string(64, '0'));
  CHECK(bad_sum.status == 400);
  CHECK(bad_sum.code() == "CHECKSUM_MISMATCH");
  dst_c->accept = status{errc::conflict, "scripted: no such move"};
  auto refused = put_move(dst.port(), key, 9, *bytes, dst_c->secret);
  CHECK(refused.status == 409);
  CHECK(refused.code() == "MOVE_REFUSED");
  dst_c->accept = status{errc::invalid_argument, "scripted: not in the shard"};
  auto wrong_shard = put_move(dst.port(), key, 9, *bytes, dst_c->secret);
  CHECK(wrong_shard.status == 409);
  CHECK(wrong_shard.code() == "MOVE_REFUSED");
  dst_c->accept = status{errc::unavailable, "scripted: etcd unreachable"}; // not a refusal
  auto unreachable = put_move(dst.port(), key, 9, *bytes, dst_c->secret);
  CHECK(unreachable.status == 503);
  CHECK(unreachable.code() == "UNAVAILABLE");
  dst_c->accept = status::ok();
  auto garbage = put_move(dst.port(), key, 9, std::string(8192, 'x'), dst_c->secret);
  CHECK(garbage.status == 422);
  CHECK(garbage.code() == "MOVE_FILE_INVALID");
  auto other_epoch = put_move(dst.port(), key, 8, *bytes, dst_c->secret);
  CHECK(other_epoch.status == 422);
  CHECK(dst.entity_files() == 0);
  CHECK(dst_c->received == 0);

  auto ok = put_move(dst.port(), key, 9, *bytes, dst_c->secret);
  REQUIRE_MESSAGE(ok.status == 204, ok.body);
  CHECK(dst_c->received == 1);
  CHECK(dst.entity_files() == 1);
  http_client dc(dst.port());
  auto facts = dc.request("GET", "/v1/entities/ledger/mv/facts", json_headers());
  REQUIRE(facts.status == 200);
  CHECK(facts.json().size() == 3);
  // A key completed on the old home replays on the new one.
  auto replay = dc.request("POST", append_path("mv"), json_headers(acme_key, "k-1"), body);
  CHECK(replay.status == 200);
  CHECK(replay.header("idempotent-replayed") == "true");
  auto next = dc.request("POST", append_path("mv"), json_headers(acme_key, "k-9"), body);
  CHECK(next.status == 200);
  CHECK(next.json()["seq"] == 4);
}
