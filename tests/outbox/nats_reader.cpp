// nats_reader.cpp: prints every message of a JetStream stream, one JSON object a line
// ({"stream_seq", "subject", "msg_id", "entity", "seq", "data"}), for the outbox's tests
// (tests/outbox/kill_test.py reads the stream the server relayed to). Usage:
//   outbox_nats_reader nats://127.0.0.1:PORT STREAM
// Exit code 0 (read), 1 (the server or the stream did not answer: the reason on stderr), 2 (usage).
// One thread.
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "factum/sinks/nats_sink.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: outbox_nats_reader nats://host:port STREAM\n");
    return 2;
  }
  auto r = factum::read_nats_stream(argv[1], argv[2], std::chrono::milliseconds(5'000));
  if (!r) {
    std::fprintf(stderr, "%s\n", r.error().to_string().c_str());
    return 1;
  }
  for (auto& m : *r)
    std::cout
      << nlohmann::json{{"stream_seq", m.stream_seq}, {"subject", m.subject}, {"msg_id", m.msg_id},
                        {"entity", m.entity},         {"seq", m.seq},         {"data", m.data}}
           .dump()
      << '\n';
  return 0;
}
