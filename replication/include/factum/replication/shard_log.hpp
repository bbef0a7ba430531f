// shard_log.hpp: a shard's replicated log on NATS JetStream (docs/cluster.md, "Replication").
// One stream per shard, R replicas, file storage, rollups allowed; subjects
//   <prefix>.<shard>.e.<entity token>   one entity's commit records, in commit order, and the
//                                       heads of its images
//   <prefix>.<shard>.i.<entity token>   the parts of the entity's images
//   <prefix>.<shard>.epoch              epoch markers: the writer that owns the log from there on
// Every message carries the headers Factum-Epoch and Factum-Writer (the writer's id). A writer is
// the shard's one owner under one epoch: it predicts each publish's stream sequence
// (Nats-Expected-Last-Sequence) and names each publish (Nats-Msg-Id "<writer id>:<sequence>") so
// that a retry is idempotent. A new writer first publishes a marker expecting the sequence it read
// up to: from then on every publish of an older writer fails its expectation, and a record that
// still lands after a marker (pipelined behind the refused one, it expected the marker's
// sequence) belongs to a writer the marker superseded, which readers skip (log_applier.hpp); it is
// reported failed. An image head removes messages (its rollup), so it must never land so: it is
// published alone, once every earlier append of its writer was answered, expecting the sequence
// after the last of them, which any marker stored since has taken. The log does not fence by
// message id (Nats-Expected-Last-Msg-Id): nats-server 2.9.10 keeps a stream's last message id in
// each replica's memory and does not update it on a replica that catches up from a snapshot, which
// then refuses every publish the others store, and should it lead, the stream holds fewer
// messages than were acknowledged.
//
// The first marker of an empty stream expects
// last sequence 0 through the header itself (libnats sends no expectation for 0); nats-server
// 2.9.10 enforces it (a publish expecting 0 onto a non-empty stream is refused,
// tests/replication/shard_log_test.cpp). Threads: every class here is safe to use from any thread;
// the `done` callbacks of a writer run in append order, never on the caller's thread: on the
// connection's acknowledgement thread (libnats', shared by its writers), or on its own callback
// thread for the appends no server answer ends (on a broken writer, a publish that failed at once).
// Keep them short: the connection's other writers wait meanwhile.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "factum/error/status.hpp"

namespace factum::replication {

/// Where the log lives and how it is written.
struct log_options {
  /// NATS servers of the cluster (nats://host:port); any one of them answers for all.
  std::vector<std::string> servers;
  /// Subject prefix and stream name prefix: streams are <stream_prefix>_<shard> (letters, digits
  /// and _ only), subjects <subject_prefix>.<shard>.>.
  std::string stream_prefix = "FACTUM_LOG";
  std::string subject_prefix = "factum.log";
  /// Replicas of each stream (1, 3 or 5): a publish is acknowledged once a majority stored it.
  int replicas = 3;
  /// A publish not acknowledged within this fails (its writer is broken from then on).
  std::chrono::milliseconds ack_timeout{5000};
  /// Publishes in flight on the connection at most (a further append waits for room).
  int64_t max_pending = 8192;
  /// Connecting and each request to the JetStream API (create a stream, read a message).
  std::chrono::milliseconds request_timeout{5000};
  /// Send each publish at once rather than let libnats gather publishes for up to 1 ms. With
  /// three local servers on 2 cores: an append that waits alone is acknowledged in ~0.2-0.4 ms
  /// instead of ~1 ms (R3); pipelined appends/s drop by up to a quarter (about the same for
  /// small records at R3, most for R1 and 2 KiB records). false: libnats' default.
  bool send_asap = true;
};

/// What an append publishes: a commit record on the entity's subject; a part of an entity's
/// image on its parts subject, the first one of an image with `Nats-Rollup: sub` (JetStream then
/// removes the parts of the entity's earlier images); or an image's head on the entity's
/// subject with `Nats-Rollup: sub` (the entity's earlier records and heads go).
enum class append_kind { record, image_first_part, image_part, image_head };

/// One message of a shard's log, as read back.
struct log_message {
  uint64_t seq = 0;    ///< stream sequence (1, 2, ...)
  int64_t epoch = 0;   ///< Factum-Epoch
  std::string writer;  ///< Factum-Writer
  bool marker = false; ///< an epoch marker (subject ...epoch), else a record, a part or a head
  bool part = false;   ///< an image part (subject ...i.<entity>)
  std::string entity;  ///< the entity token of a record's or a part's subject; empty for a marker
  std::string data;    ///< the payload
};

/// A connection to the NATS cluster, shared by the shard logs of one node.
class log_connection {
 public:
  /// Connects (bounded by request_timeout). UNAVAILABLE when no server answers.
  static result<std::shared_ptr<log_connection>> connect(const log_options& o);
  ~log_connection();
  log_connection(const log_connection&) = delete;
  log_connection& operator=(const log_connection&) = delete;

  const log_options& options() const noexcept;

  /// Creates shard `k`'s stream when it does not exist (R replicas, file storage, limits
  /// retention, duplicate window 2 minutes, rollups allowed); ok when it exists with the same
  /// subjects, after allowing rollups on it when it did not. CONFLICT when it exists with other
  /// subjects or denies purges (which JetStream cannot undo, and which refuses rollups).
  status ensure_stream(uint32_t k);
  /// The stream's last sequence (0: empty). NOT_FOUND when the stream does not exist.
  result<uint64_t> last_seq(uint32_t k);
  /// The first sequence still held (after trims), 0 when empty.
  result<uint64_t> first_seq(uint32_t k);
  /// Calls `fn` for each message of shard `k` with sequence in [from, to] in order (to = 0: up
  /// to the last sequence when the call began); stops early when `fn` answers false. A range
  /// below 32 messages is read one request per message; a longer one through an ordered
  /// consumer (ephemeral, flow-controlled push) from `from`, created and removed by the call.
  status read(uint32_t k, uint64_t from, uint64_t to,
              const std::function<bool(const log_message&)>& fn);
  /// The message of shard `k` at sequence `seq`, or nothing when the stream holds none there
  /// (never written, or removed by a rollup or a purge). UNAVAILABLE when the log cannot be read.
  /// NOT_FOUND when the stream does not exist.
  result<std::optional<log_message>> get(uint32_t k, uint64_t seq);
  /// The last message on an entity's subject, or nothing when the entity has none.
  result<std::optional<log_message>> last_of_entity(uint32_t k, const std::string& entity);
  /// The last epoch marker of shard `k`, or nothing.
  result<std::optional<log_message>> last_marker(uint32_t k);
  /// Removes the messages of shard `k` below sequence `below` (the log's trim).
  status trim(uint32_t k, uint64_t below);
  /// Removes the image parts of `entity` in shard `k`'s log below sequence `below`.
  /// INVALID_ARGUMENT when `entity` is not a subject token. The replicator does not use it: in
  /// the replicated rounds, with purges of image parts, streams lost every message below a
  /// purge's sequence (markers and other entities' records included) across the NATS server
  /// kills; the first part of each image rolls up the parts subject instead.
  status purge_parts(uint32_t k, const std::string& entity, uint64_t below);
  /// Deletes shard `k`'s stream (tests and `factum cluster` reset); ok when it does not exist.
  status delete_stream(uint32_t k);

  struct impl;
  impl& internals() noexcept { return *impl_; }

 private:
  explicit log_connection(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

/// The writer of one shard's log: the shard's owner under `epoch`.
class shard_writer {
 public:
  using done_fn = std::function<void(const status&, uint64_t seq)>;

  /// Opens a writer: reads the stream's last sequence L and its last marker; CONFLICT when that
  /// marker's epoch is newer than `epoch`; else publishes a marker (epoch, a new writer id)
  /// expecting L, and answers the writer once a quorum stored it. CONFLICT when the log moved
  /// past L meanwhile (another writer: read again and retry, or give the shard up).
  static result<std::unique_ptr<shard_writer>> open(std::shared_ptr<log_connection> c, uint32_t k,
                                                    int64_t epoch);
  ~shard_writer();
  shard_writer(const shard_writer&) = delete;
  shard_writer& operator=(const shard_writer&) = delete;

  uint32_t shard() const noexcept;
  int64_t epoch() const noexcept;
  const std::string& writer_id() const noexcept;
  /// The marker's sequence: the log this writer continues.
  uint64_t marker_seq() const noexcept;

  /// Appends one message of `kind` for `entity` (a token of [0-9a-f]), pipelined: returns at
  /// once (or once there is room under max_pending: not from inside a `done`, whose thread makes
  /// the room) the stream sequence the message gets if it is stored (exact: every publish
  /// expects its predecessor's sequence), or 0 when the append failed at once (the writer is
  /// broken, the entity is not a token, libnats did not take the publish). `done` runs exactly
  /// once, in append order (threads: above): ok and that sequence once a quorum stored it; or
  /// CONFLICT (the log moved: a newer writer; any refusal by JetStream, or an acknowledgement at
  /// another sequence than predicted) or UNAVAILABLE (no acknowledgement within ack_timeout, NATS
  /// down), with sequence 0. After the first failure the writer is broken: that append and
  /// every later one fail, even when the server acknowledges them later, and nothing more is
  /// published. An entity that is not a subject token fails that append only
  /// (INVALID_ARGUMENT).
  /// An image head waits, before it is published, until every earlier append of this writer
  /// was answered (at most ack_timeout + 2 s; then the writer breaks): never append one from
  /// inside a `done`.
  uint64_t append(const std::string& entity, std::string data, done_fn done,
                  append_kind kind = append_kind::record);
  /// Whether a failure broke the writer (open a new one to go on).
  bool broken() const noexcept;
  /// Appends whose `done` has not run yet.
  size_t in_flight() const noexcept;
  /// Waits (bounded) until every append's `done` ran. UNAVAILABLE when some did not (at once
  /// inside a `done`: the others run after it). The destructor drains for ack_timeout + 2 s.
  status drain(std::chrono::milliseconds wait);

  struct impl;

 private:
  explicit shard_writer(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

} // namespace factum::replication
