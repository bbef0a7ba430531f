// nats_log.hpp (internal): what the shard log's connection (shard_log.cpp) and its writer
// (shard_writer.cpp) share: the connection's state behind log_connection::impl (the NATS
// connection, its one JetStream context, the writers its publish acknowledgements go to, the
// callback thread), the names of streams and subjects, the header names, error mapping and the
// parsing of a message into a log_message. The only header of the tree besides those two files
// that includes <nats.h>.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include <nats/nats.h>

#include "factum/replication/shard_log.hpp"

namespace factum::replication::detail {

// -- headers and names --

inline constexpr const char* epoch_header = "Factum-Epoch";
inline constexpr const char* writer_header = "Factum-Writer";
inline constexpr const char* msg_id_header = "Nats-Msg-Id";
inline constexpr const char* expected_last_seq_header = "Nats-Expected-Last-Sequence";
inline constexpr const char* rollup_header = "Nats-Rollup";
/// The value of rollup_header that removes the earlier messages of the message's subject.
inline constexpr const char* rollup_subject = "sub";

/// JetStream's error codes the log tells apart.
inline constexpr int js_wrong_last_sequence = 10071;
inline constexpr int js_wrong_last_msg_id = 10070;
inline constexpr int js_stream_not_found = 10059;
inline constexpr int js_no_message_found = 10037;
inline constexpr int js_stream_name_in_use = 10058;
inline constexpr int js_subjects_overlap = 10065;

/// `<stream_prefix>_<k>`.
std::string stream_name(const log_options& o, uint32_t k);
/// `<subject_prefix>.<k>`: the shard's subjects are this and a token or more after it.
std::string subject_root(const log_options& o, uint32_t k);
/// `<subject_prefix>.<k>.epoch`.
std::string epoch_subject(const log_options& o, uint32_t k);
/// `<subject_prefix>.<k>.e.<entity>`.
std::string entity_subject(const log_options& o, uint32_t k, const std::string& entity);
/// `<subject_prefix>.<k>.i.<entity>`: the parts of the entity's images.
std::string parts_subject(const log_options& o, uint32_t k, const std::string& entity);
/// Whether `s` can be an entity's token: 1..255 printable ASCII bytes without '.', '*', '>'.
bool valid_token(const std::string& s);

/// libnats' text for `s`, the JetStream error code when there is one, and the thread's last
/// error (what the server said).
std::string nats_error(natsStatus s, int jerr = 0);
/// CONFLICT for a JetStream error (the server refused: wrong last sequence, ...), else
/// UNAVAILABLE (timeout, no responders, the connection), with `what` and the error's text.
status nats_status(const std::string& what, natsStatus s, int jerr);

/// A message of a shard's stream (whose subjects are under `root`) as a log_message: headers
/// parsed; a marker when the subject is <root>.epoch; an image part when it is under <root>.i.;
/// the entity of a record or a part is what follows <root>.e. or <root>.i.
log_message parse_message(natsMsg* m, uint64_t seq, const std::string& root);

/// Owns a natsMsg.
struct msg_deleter {
  void operator()(natsMsg* m) const noexcept { natsMsg_Destroy(m); }
};
using msg_ptr = std::unique_ptr<natsMsg, msg_deleter>;

// -- the callback thread --

/// One thread that runs posted functions in order: a writer's `done` callbacks that no NATS
/// thread is there to run (an append on a writer already broken, a publish that failed at once).
class callback_thread {
 public:
  callback_thread();
  ~callback_thread(); ///< runs what was posted, then joins
  void post(std::function<void()> f);

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

/// A writer's state (shard_writer.cpp): its appends in flight, in order. Shared by the writer
/// and its connection's list of writers, so that appends still in flight after the writer
/// was destroyed are answered.
struct writer_state;

/// Whether this thread is running a writer's `done` callback now (a writer's destructor and
/// drain() do not wait there: the callbacks they would wait for run after this one).
inline thread_local bool in_callback = false;

} // namespace factum::replication::detail

namespace factum::replication {

struct log_connection::impl {
  log_options opts;
  natsOptions* nopts = nullptr;
  natsConnection* conn = nullptr;
  jsCtx* js = nullptr;
  /// The writers open or with appends in flight, by writer id: the acknowledgement handler
  /// finds an append's writer by the Nats-Msg-Id "<writer id>:<seq>" of its message.
  std::mutex writers_mu;
  std::unordered_map<std::string, std::shared_ptr<detail::writer_state>> writers;
  std::unique_ptr<detail::callback_thread> callbacks;
  /// Whether a writer published asynchronously on `js` (see ~impl).
  std::atomic<bool> published_async{false};

  ~impl();
  status connect();
  /// The JetStream context's acknowledgement handler (one per connection): every asynchronous
  /// publish's PubAck, error or timeout (MaxWait), on the context's reply thread. Defined in
  /// shard_writer.cpp, where the writer's state is.
  static void on_ack(jsCtx* js, natsMsg* msg, jsPubAck* pa, jsPubAckErr* pae, void* closure);
};

} // namespace factum::replication
