// etcd_client.cpp: the etcd v3 client of cluster mode (factum/cluster/etcd_client.hpp): request
// bodies and answers of etcd's JSON gateway (keys and values in base64), the failover over
// endpoints and the mapping of etcd's errors to status codes. One thread at a time (the caller's).
#include <algorithm>
#include <functional>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "factum/cluster/etcd_client.hpp"
#include "factum/http/client.hpp"
#include "factum/storage/base64.hpp"

namespace factum::cluster {

namespace {

using json = nlohmann::json;
namespace hc = http::client;

// -- reading answers --

/// An answer without a field it must have, or with a field of the wrong shape. call() turns it
/// into a failure of the endpoint that sent it.
struct bad_answer : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// An int64 field: etcd writes them as JSON strings ("42"); a number is accepted too. An absent
/// field is 0 (the gateway omits zero values).
int64_t int_field(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null())
    return 0;
  if (it->is_number_integer())
    return it->get<int64_t>();
  if (!it->is_string())
    throw bad_answer(std::string("field ") + name + " is neither a string nor an integer");
  const auto& s = it->get_ref<const std::string&>();
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size())
    throw bad_answer(std::string("field ") + name + " is not an integer: " + s);
  return v;
}

/// A bytes field (base64 in the answer), decoded; absent is "".
std::string bytes_field(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null())
    return {};
  if (!it->is_string())
    throw bad_answer(std::string("field ") + name + " is not a string");
  auto bytes = base64_decode(it->get_ref<const std::string&>());
  if (!bytes)
    throw bad_answer(std::string("field ") + name + " is not base64");
  return std::move(*bytes);
}

/// An object field that must be present.
const json& object_field(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || !it->is_object())
    throw bad_answer(std::string("no object ") + name);
  return *it;
}

/// An array field; absent is an empty array.
const json& array_field(const json& obj, const char* name) {
  static const json empty = json::array();
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null())
    return empty;
  if (!it->is_array())
    throw bad_answer(std::string("field ") + name + " is not an array");
  return *it;
}

int64_t header_revision(const json& answer) {
  return int_field(object_field(answer, "header"), "revision");
}

etcd_kv read_kv(const json& kv) {
  if (!kv.is_object())
    throw bad_answer("a key-value is not an object");
  etcd_kv out;
  out.key = bytes_field(kv, "key");
  out.value = bytes_field(kv, "value");
  out.create_revision = int_field(kv, "create_revision");
  out.mod_revision = int_field(kv, "mod_revision");
  out.version = int_field(kv, "version");
  out.lease = int_field(kv, "lease");
  return out;
}

std::vector<etcd_kv> read_kvs(const json& range_answer) {
  std::vector<etcd_kv> out;
  for (const auto& kv : array_field(range_answer, "kvs"))
    out.push_back(read_kv(kv));
  return out;
}

// -- building requests --

/// The end of the key range of every key starting with `prefix` (etcd's "prefix end"): the
/// prefix without its trailing 0xff bytes, last byte plus one; "\0" (no end) when none is left.
std::string prefix_end(std::string prefix) {
  while (!prefix.empty() && uint8_t(prefix.back()) == 0xff)
    prefix.pop_back();
  if (prefix.empty())
    return std::string(1, '\0');
  prefix.back() = char(uint8_t(prefix.back()) + 1);
  return prefix;
}

json put_request(const std::string& key, const std::string& value, int64_t lease) {
  json put = {{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease != 0)
    put["lease"] = std::to_string(lease);
  return put;
}

status check_key(const std::string& key) {
  if (key.empty())
    return status{errc::invalid_argument, "etcd: the key is empty"};
  return status::ok();
}

status check_lease(int64_t lease) {
  if (lease < 0)
    return status{errc::invalid_argument, "etcd: negative lease id " + std::to_string(lease)};
  return status::ok();
}

// -- transport failures --

std::string_view to_string(hc::failure f) {
  switch (f) {
  case hc::failure::none: return "no failure";
  case hc::failure::timeout: return "timed out";
  case hc::failure::resolve: return "the host did not resolve";
  case hc::failure::refused: return "connection refused";
  case hc::failure::closed: return "connection closed";
  case hc::failure::not_loopback: return "not a loopback address";
  case hc::failure::pool_full: return "pool full";
  case hc::failure::cancelled: return "cancelled";
  case hc::failure::other: return "failed";
  }
  return "failed";
}

/// "connection refused during connect (Connection refused)".
std::string describe(const hc::reply& r) {
  std::string out(to_string(r.failed));
  out += " during ";
  out += hc::to_string(r.failed_at);
  if (!r.error.empty())
    out += " (" + r.error + ")";
  return out;
}

/// etcd's error in an answer: {"error": "...", "message": "...", "code": N} for unary calls,
/// {"error": {"grpc_code": N, "message": "..."}} for a streamed one (the keepalive).
struct etcd_error {
  int code = 2; ///< gRPC code (2: unknown)
  std::string message;
};

std::optional<etcd_error> find_error(const json& answer) {
  auto it = answer.find("error");
  if (it == answer.end())
    return std::nullopt;
  etcd_error e;
  const json& src = it->is_object() ? *it : answer;
  if (auto c = src.find(it->is_object() ? "grpc_code" : "code");
      c != src.end() && c->is_number_integer())
    e.code = c->get<int>();
  if (auto m = src.find("message"); m != src.end() && m->is_string())
    e.message = m->get<std::string>();
  else if (it->is_string())
    e.message = it->get<std::string>();
  return e;
}

} // namespace

// -- failover --

struct etcd_client::impl {
  struct endpoint {
    std::string text; ///< as given to make()
    hc::url url;
    std::unique_ptr<hc::sync_client> client;
    bool answered = false; ///< the last exchange got a response (its connection may be kept)
  };

  std::vector<endpoint> endpoints;
  size_t current = 0;

  /// What one endpoint did with a request.
  struct attempt {
    enum { done, own_error, failed } outcome = failed;
    status error; ///< own_error: the request's own error; failed: why (without the endpoint)
  };

  /// POSTs `body` to `path` on one endpoint and hands the answer to `take`.
  attempt try_endpoint(endpoint& ep, const std::string& path, const std::string& body,
                       const std::function<void(const json&)>& take) {
    static const hc::header_list headers = {{"Content-Type", "application/json"}};
    auto fail = [](std::string why) {
      return attempt{attempt::failed, status{errc::unavailable, std::move(why)}};
    };
    auto target = ep.url.path + path;
    auto r = ep.client->request("POST", target, headers, body);
    if (r.status == 0 && r.failed == hc::failure::closed && ep.answered)
      r = ep.client->request("POST", target, headers, body); // a kept-alive connection went stale
    ep.answered = r.status != 0;
    if (r.status == 0)
      return fail(describe(r));
    auto http_status = "HTTP " + std::to_string(r.status);
    auto answer = json::parse(r.body, nullptr, false);
    if (answer.is_discarded() || !answer.is_object())
      return fail(r.status == 200 ? "answered with a body that is not a JSON object"
                                  : "answered " + http_status + " " + r.reason);
    if (auto e = find_error(answer)) {
      auto what = http_status + ", code " + std::to_string(e->code) + ": " + e->message;
      if (e->code == 3 || e->code == 11) // InvalidArgument, OutOfRange
        return {attempt::own_error, status{errc::invalid_argument, "etcd refused: " + what}};
      if (e->code == 5) // NotFound: "requested lease not found"
        return {attempt::own_error, status{errc::not_found, "etcd: " + what}};
      return fail("answered " + what);
    }
    if (r.status != 200) // a 3xx (not followed), or an error without etcd's error body
      return fail("answered " + http_status + " " + r.reason);
    try {
      take(answer);
    } catch (const std::exception& e) { // bad_answer, or nlohmann's type errors
      return fail(std::string("answered malformed JSON (") + e.what() + ")");
    }
    return {attempt::done, status::ok()};
  }

  /// Sends the request to the current endpoint, then to each other one once until one answers.
  status call(const std::string& path, const json& body,
              const std::function<void(const json&)>& take) {
    auto text = body.dump();
    std::string failures;
    for (size_t n = 0; n < endpoints.size(); ++n) {
      size_t i = (current + n) % endpoints.size();
      auto a = try_endpoint(endpoints[i], path, text, take);
      if (a.outcome != attempt::failed) {
        current = i;
        return a.error;
      }
      if (!failures.empty())
        failures += "; ";
      failures += endpoints[i].text + ": " + a.error.message();
    }
    return status{errc::unavailable, "etcd " + path + " failed on every endpoint: " + failures};
  }
};

etcd_client::etcd_client(std::unique_ptr<impl> i) : impl_(std::move(i)) {}

etcd_client::~etcd_client() = default;

result<std::unique_ptr<etcd_client>> etcd_client::make(std::vector<std::string> endpoints,
                                                       etcd_options opts) {
  if (endpoints.empty())
    return status{errc::invalid_argument, "etcd: no endpoint given"};
  if (opts.timeout <= std::chrono::milliseconds(0))
    return status{errc::invalid_argument, "etcd: the timeout must be positive"};
  auto i = std::make_unique<impl>();
  hc::sync_options so;
  so.timeout = opts.timeout;
  for (auto& text : endpoints) {
    auto u = hc::parse_url(text);
    if (!u)
      return status{errc::invalid_argument, "etcd endpoint '" + text + "': " + u.error().message()};
    impl::endpoint ep;
    ep.url = std::move(*u);
    ep.client = std::make_unique<hc::sync_client>(ep.url.host, ep.url.port, so);
    ep.text = std::move(text);
    i->endpoints.push_back(std::move(ep));
  }
  return std::unique_ptr<etcd_client>(new etcd_client(std::move(i)));
}

const std::string& etcd_client::endpoint() const {
  return impl_->endpoints[impl_->current].text;
}

// -- leases --

result<int64_t> etcd_client::grant(std::chrono::milliseconds ttl) {
  if (ttl <= std::chrono::milliseconds(0))
    return status{errc::invalid_argument, "etcd: a lease's TTL must be positive"};
  auto seconds = ttl.count() / 1000 + (ttl.count() % 1000 != 0); // rounded up
  int64_t id = 0;
  auto st = impl_->call("/v3/lease/grant", {{"TTL", std::to_string(seconds)}}, [&](const json& a) {
    id = int_field(a, "ID");
    if (id <= 0)
      throw bad_answer("no lease ID");
  });
  if (!st)
    return st;
  return id;
}

result<int64_t> etcd_client::keepalive(int64_t lease) {
  if (auto st = check_lease(lease); !st)
    return st;
  int64_t ttl = 0;
  auto st = impl_->call("/v3/lease/keepalive", {{"ID", std::to_string(lease)}},
                        [&](const json& a) { ttl = int_field(object_field(a, "result"), "TTL"); });
  if (!st)
    return st;
  return std::max<int64_t>(ttl, 0) * 1000;
}

result<int64_t> etcd_client::time_to_live(int64_t lease) {
  if (auto st = check_lease(lease); !st)
    return st;
  int64_t ttl = 0;
  auto st =
    impl_->call("/v3/lease/timetolive", {{"ID", std::to_string(lease)}}, [&](const json& a) {
      header_revision(a);
      ttl = int_field(a, "TTL");
    });
  if (!st)
    return st;
  return ttl < 0 ? -1 : ttl * 1000; // etcd: -1 for an expired or unknown lease
}

status etcd_client::revoke(int64_t lease) {
  if (auto st = check_lease(lease); !st)
    return st;
  auto st = impl_->call("/v3/lease/revoke", {{"ID", std::to_string(lease)}},
                        [](const json& a) { header_revision(a); });
  if (st.code() == errc::not_found)
    return status::ok();
  return st;
}

// -- reads --

result<std::vector<etcd_kv>> etcd_client::range_prefix(const std::string& prefix,
                                                       int64_t* revision) {
  std::string key = prefix.empty() ? std::string(1, '\0') : prefix;
  json body = {{"key", base64_encode(key)}, {"range_end", base64_encode(prefix_end(prefix))}};
  std::vector<etcd_kv> kvs;
  int64_t rev = 0;
  auto st = impl_->call("/v3/kv/range", body, [&](const json& a) {
    rev = header_revision(a);
    kvs = read_kvs(a);
  });
  if (!st)
    return st;
  auto by_key = [](const etcd_kv& x, const etcd_kv& y) { return x.key < y.key; };
  if (!std::is_sorted(kvs.begin(), kvs.end(), by_key))
    std::sort(kvs.begin(), kvs.end(), by_key);
  if (revision)
    *revision = rev;
  return kvs;
}

result<std::optional<etcd_kv>> etcd_client::get(const std::string& key, int64_t* revision) {
  if (auto st = check_key(key); !st)
    return st;
  std::optional<etcd_kv> out;
  int64_t rev = 0;
  auto st = impl_->call("/v3/kv/range", {{"key", base64_encode(key)}}, [&](const json& a) {
    rev = header_revision(a);
    auto kvs = read_kvs(a);
    if (kvs.size() > 1 || (kvs.size() == 1 && kvs[0].key != key))
      throw bad_answer("a range of one key answered another key");
    if (!kvs.empty())
      out = std::move(kvs[0]);
  });
  if (!st)
    return st;
  if (revision)
    *revision = rev;
  return out;
}

// -- writes --

result<int64_t> etcd_client::put(const std::string& key, const std::string& value, int64_t lease) {
  if (auto st = check_key(key); !st)
    return st;
  if (auto st = check_lease(lease); !st)
    return st;
  int64_t rev = 0;
  auto st = impl_->call("/v3/kv/put", put_request(key, value, lease),
                        [&](const json& a) { rev = header_revision(a); });
  if (!st)
    return st;
  return rev;
}

namespace {

/// A transaction on `key`: if `compare` holds, run `op`, else read the key.
json txn_request(const std::string& key, json compare, json op) {
  json read = {{"requestRange", {{"key", base64_encode(key)}}}};
  return {{"compare", json::array({std::move(compare)})},
          {"success", json::array({std::move(op)})},
          {"failure", json::array({std::move(read)})}};
}

/// Reads a txn_request's answer.
txn_result read_txn(const json& a) {
  txn_result out;
  out.revision = header_revision(a);
  auto it = a.find("succeeded");
  out.succeeded = it != a.end() && it->is_boolean() && it->get<bool>();
  if (out.succeeded)
    return out;
  const auto& responses = array_field(a, "responses");
  if (responses.size() != 1)
    throw bad_answer("a failed transaction answered no read");
  auto kvs = read_kvs(object_field(responses[0], "response_range"));
  if (!kvs.empty())
    out.current = std::move(kvs[0]);
  return out;
}

} // namespace

result<txn_result> etcd_client::create_if_absent(const std::string& key, const std::string& value,
                                                 int64_t lease) {
  if (auto st = check_key(key); !st)
    return st;
  if (auto st = check_lease(lease); !st)
    return st;
  json compare = {{"target", "CREATE"},
                  {"result", "EQUAL"},
                  {"key", base64_encode(key)},
                  {"createRevision", "0"}};
  txn_result out;
  auto st = impl_->call(
    "/v3/kv/txn",
    txn_request(key, std::move(compare), {{"requestPut", put_request(key, value, lease)}}),
    [&](const json& a) { out = read_txn(a); });
  if (!st)
    return st;
  return out;
}

namespace {

/// The compare of a transaction that holds while `key`'s mod_revision is `mod_revision`.
json mod_revision_is(const std::string& key, int64_t mod_revision) {
  return {{"target", "MOD"},
          {"result", "EQUAL"},
          {"key", base64_encode(key)},
          {"modRevision", std::to_string(mod_revision)}};
}

} // namespace

result<txn_result> etcd_client::put_if_mod_revision(const std::string& key,
                                                    const std::string& value, int64_t mod_revision,
                                                    int64_t lease) {
  if (auto st = check_lease(lease); !st)
    return st;
  return if_mod_revision(key, mod_revision, {{"requestPut", put_request(key, value, lease)}});
}

result<txn_result> etcd_client::delete_if_mod_revision(const std::string& key,
                                                       int64_t mod_revision) {
  return if_mod_revision(key, mod_revision,
                         {{"requestDeleteRange", {{"key", base64_encode(key)}}}});
}

result<txn_result> etcd_client::if_mod_revision(const std::string& key, int64_t mod_revision,
                                                nlohmann::json op) {
  if (auto st = check_key(key); !st)
    return st;
  if (mod_revision < 0)
    return status{errc::invalid_argument, "etcd: negative mod_revision"};
  txn_result out;
  auto st =
    impl_->call("/v3/kv/txn", txn_request(key, mod_revision_is(key, mod_revision), std::move(op)),
                [&](const json& a) { out = read_txn(a); });
  if (!st)
    return st;
  return out;
}

status etcd_client::delete_key(const std::string& key) {
  if (auto st = check_key(key); !st)
    return st;
  return impl_->call("/v3/kv/deleterange", {{"key", base64_encode(key)}},
                     [](const json& a) { header_revision(a); });
}

result<txn_result> etcd_client::transact(const std::vector<etcd_compare>& compares,
                                         const std::vector<etcd_write>& writes) {
  if (writes.empty())
    return status{errc::invalid_argument, "etcd: a transaction without writes"};
  json cmp = json::array();
  for (auto& c : compares) {
    if (auto st = check_key(c.key); !st)
      return st;
    if (c.revision < 0)
      return status{errc::invalid_argument, "etcd: negative revision"};
    json one = {{"result", "EQUAL"}, {"key", base64_encode(c.key)}};
    switch (c.what) {
    case etcd_compare::field::value:
      one["target"] = "VALUE";
      one["value"] = base64_encode(c.value);
      break;
    case etcd_compare::field::create:
      one["target"] = "CREATE";
      one["createRevision"] = std::to_string(c.revision);
      break;
    case etcd_compare::field::mod:
      one["target"] = "MOD";
      one["modRevision"] = std::to_string(c.revision);
      break;
    }
    cmp.push_back(std::move(one));
  }
  json ops = json::array();
  for (auto& w : writes) {
    if (auto st = check_key(w.key); !st)
      return st;
    if (auto st = check_lease(w.lease); !st)
      return st;
    if (w.value)
      ops.push_back({{"requestPut", put_request(w.key, *w.value, w.lease)}});
    else
      ops.push_back({{"requestDeleteRange", {{"key", base64_encode(w.key)}}}});
  }
  txn_result out;
  auto st = impl_->call("/v3/kv/txn", {{"compare", std::move(cmp)}, {"success", std::move(ops)}},
                        [&](const json& a) {
                          out.revision = header_revision(a);
                          auto it = a.find("succeeded");
                          out.succeeded = it != a.end() && it->is_boolean() && it->get<bool>();
                        });
  if (!st)
    return st;
  return out;
}

} // namespace factum::cluster
