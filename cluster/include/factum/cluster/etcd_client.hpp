// factum/cluster/etcd_client.hpp: a synchronous etcd v3 client over etcd's JSON gateway (plain
// HTTP/1.1 POSTs to /v3/..., keys and values base64), for cluster mode's membership, leases and
// shard ownership (docs/dependencies.md, "etcd"). One thread at a time: the node's cluster
// thread. Boost.Beast and nlohmann_json stay behind this header, in cluster/src/etcd_client.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "factum/error/status.hpp"

namespace factum::cluster {

/// Settings of an etcd_client.
struct etcd_options {
  /// Deadline of one HTTP exchange with one endpoint (connect, send, read). A call that fails
  /// over tries each endpoint once, so it returns within endpoints x timeout. Default 2 s.
  std::chrono::milliseconds timeout{2'000};
};

/// One key as etcd stores it.
struct etcd_kv {
  std::string key;   ///< decoded bytes (not base64)
  std::string value; ///< decoded bytes (not base64)
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;
  int64_t lease = 0; ///< 0: not bound to a lease

  friend bool operator==(const etcd_kv&, const etcd_kv&) = default;
};

/// The outcome of a conditional write (one etcd transaction).
struct txn_result {
  bool succeeded = false;
  /// The store's revision after the transaction (header revision). When a put succeeded, the
  /// put's revision: the key's new mod_revision (and create_revision for create_if_absent).
  int64_t revision = 0;
  /// When the comparison failed: the key as it is now (read in the same transaction); nullopt
  /// when it is absent. Always nullopt on success.
  std::optional<etcd_kv> current;
};

/// One comparison of a transaction (etcd_client::transact).
struct etcd_compare {
  enum class field {
    value,  ///< the key's value equals `value` (an absent key never does)
    create, ///< the key's create revision equals `revision` (0: the key is absent)
    mod,    ///< the key's mod revision equals `revision` (0: the key is absent)
  };
  std::string key;
  field what = field::value;
  std::string value;
  int64_t revision = 0;
};

/// One write of a transaction (etcd_client::transact): a put of `value` (bound to `lease` when
/// not 0), or a delete of `key` when `value` is nullopt.
struct etcd_write {
  std::string key;
  std::optional<std::string> value;
  int64_t lease = 0;
};

/// A client of one etcd cluster, given as the client URLs of some of its members.
///
/// Failover: each call sends its request to the endpoint that answered last, and when that
/// fails (no connection, a timeout, a 5xx, an etcd error of the server's own such as "no
/// leader" or "request timed out", an answer that is not the expected JSON) to each other
/// endpoint once, in the order given. When all fail: UNAVAILABLE, naming every endpoint and
/// what failed there. Redirects are not followed (a 3xx is a failure of that endpoint). A
/// kept-alive connection that the server had closed (etcd restarted) is retried once on a
/// fresh connection to the same endpoint.
///
/// Errors that are the request's own are returned at once, without failover: INVALID_ARGUMENT
/// (checked before sending: an empty key, a negative lease id or revision, a TTL <= 0; or etcd
/// answered InvalidArgument or OutOfRange) and NOT_FOUND (etcd answered "requested lease not
/// found": a put or transaction bound to a lease that has expired or was revoked).
///
/// A write that timed out may still have been applied by the member that timed out, even when
/// the call fails with UNAVAILABLE (a member without a quorum can log the write and commit it
/// once the quorum is back). A retry then sees its effect. For the conditional writes this is
/// visible and safe: a create_if_absent whose earlier attempt was applied reports
/// `succeeded == false` with `current` holding the caller's own value and lease. Callers that
/// need to tell these apart compare `current` with what they wrote.
class etcd_client {
 public:
  /// A client of `endpoints` ("http://host:port" client URLs; a path, if any, prefixes every
  /// request). INVALID_ARGUMENT for an empty list or a URL that http::client::parse_url refuses.
  /// Connects lazily: making a client never blocks.
  static result<std::unique_ptr<etcd_client>> make(std::vector<std::string> endpoints,
                                                   etcd_options opts = {});
  ~etcd_client();
  etcd_client(const etcd_client&) = delete;
  etcd_client& operator=(const etcd_client&) = delete;

  // -- leases --

  /// Grants a lease of `ttl` rounded up to whole seconds (etcd may raise it to its minimum,
  /// 1.5 x the election timeout); its id. INVALID_ARGUMENT when ttl <= 0.
  result<int64_t> grant(std::chrono::milliseconds ttl);

  /// Renews `lease` once (a one-shot POST /v3/lease/keepalive): the lease's remaining TTL in ms
  /// as etcd says it (whole seconds x 1000); 0 when the lease has expired, was revoked or is
  /// unknown (etcd answers those alike, without a TTL).
  result<int64_t> keepalive(int64_t lease);

  /// The remaining TTL of `lease` in ms without renewing it, as etcd says it: whole seconds
  /// rounded down, x 1000 (0 while less than a second is left); -1 when the lease has expired,
  /// was revoked or is unknown.
  result<int64_t> time_to_live(int64_t lease);

  /// Revokes `lease`, deleting every key bound to it. A lease that expired or is unknown is ok.
  status revoke(int64_t lease);

  // -- reads --

  /// Every key starting with `prefix` (any bytes; "" for every key), sorted by key.
  /// `revision`, when given, receives the store's revision the read saw.
  result<std::vector<etcd_kv>> range_prefix(const std::string& prefix, int64_t* revision = nullptr);

  /// One key, or nullopt when it is absent. INVALID_ARGUMENT for an empty key.
  result<std::optional<etcd_kv>> get(const std::string& key, int64_t* revision = nullptr);

  // -- writes --

  /// Puts `key` (optionally bound to `lease`); the put's revision.
  result<int64_t> put(const std::string& key, const std::string& value, int64_t lease = 0);

  /// Puts `key` only if it does not exist (compare CREATE createRevision == 0).
  result<txn_result> create_if_absent(const std::string& key, const std::string& value,
                                      int64_t lease = 0);

  /// Puts `key` only if its mod_revision is `mod_revision` (0 matches an absent key, as in
  /// etcd). INVALID_ARGUMENT when mod_revision < 0.
  result<txn_result> put_if_mod_revision(const std::string& key, const std::string& value,
                                         int64_t mod_revision, int64_t lease = 0);

  /// Deletes `key` only if its mod_revision is `mod_revision` (0 matches an absent key: the
  /// transaction succeeds and deletes nothing). INVALID_ARGUMENT when mod_revision < 0.
  result<txn_result> delete_if_mod_revision(const std::string& key, int64_t mod_revision);

  /// Deletes `key`; ok when it was absent.
  status delete_key(const std::string& key);

  /// Runs every write of `writes`, atomically, when every comparison of `compares` holds; does
  /// nothing otherwise. `succeeded`: the comparisons held (the writes ran); `revision`: the
  /// store's revision after it (the writes' revision when they ran); `current` is not read.
  /// INVALID_ARGUMENT for an empty key or list of writes, or a negative revision or lease.
  result<txn_result> transact(const std::vector<etcd_compare>& compares,
                              const std::vector<etcd_write>& writes);

  // -- endpoints --

  /// The endpoint the next call tries first (the last one that answered), as given to make().
  const std::string& endpoint() const;

 private:
  struct impl;
  explicit etcd_client(std::unique_ptr<impl> i);
  /// One transaction on `key`: `op` (a request of etcd's txn) while its mod_revision is
  /// `mod_revision`, else a read of it (txn_result::current).
  result<txn_result> if_mod_revision(const std::string& key, int64_t mod_revision,
                                     nlohmann::json op);
  std::unique_ptr<impl> impl_;
};

} // namespace factum::cluster
