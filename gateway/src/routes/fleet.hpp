// http/fleet.hpp (private to the gateway): what the fleet views share (docs/http-api.md, "Fleet
// views"): their opaque cursors, and in a cluster the gathering of every node's part of a view
// and the merges that make one answer of them (fleet_cluster.cpp). A client's request is
// answered by the node it reached: that node relays the same request to every other live node
// (each answers from its own tenant index, as for a relayed request it never relays again), adds
// its own part and merges. Parts arrive on a storage thread, a CAF worker and the relay's I/O
// thread; a gathering is under its own mutex.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gateway_steps.hpp"

namespace factum::http::steps {

// -- cursors --

/// A cursor is the JSON array of the last item's sort key, base64url without padding: opaque
/// to clients, safe in a query and a Link.
std::string encode_cursor(const nlohmann::json& key);

/// The array a cursor holds, `n` members long: strings but for the positions in `ints`; null
/// when it is not one this server gave.
nlohmann::json decode_cursor(std::string text, size_t n, std::initializer_list<size_t> ints);

// -- a view across the nodes of a cluster --

/// Where a view's local part goes: the client (alone), or the gathering (a cluster).
using answer_sink = std::function<void(http_response)>;

/// `r` to `sink` when there is one (a cluster's part), else to the client.
void answer(gateway& gw, const exchange_ptr& x, const answer_sink& sink, http_response r);

/// A page of a fleet view: `body` as JSON, with a Link to the next page when `body["next"]` is a
/// cursor.
http_response page_answer(const exchange& x, const nlohmann::json& body);

/// Whether `x` is a client's request to a node of a cluster that can reach the others: its
/// answer is then every node's part, merged.
bool fans_out(gateway& gw, const exchange& x);

/// Relays `req` (the client's, or one made from it; the client's API key and trace id go
/// along) to every other live node and returns the sink of this node's own part. Once every
/// part has come as a 200 JSON body, `merge` gets them (this node's first), on the thread of
/// the last one; it answers the client itself. A node that is down, or a part that fails, makes
/// the answer 503 SHARD_UNAVAILABLE (Retry-After 1): a view never shows part of the fleet as all
/// of it. When a node is known down before anything is sent, the client is answered at once
/// and the sink returned is empty.
answer_sink gather(gateway& gw, const exchange_ptr& x, http_request req,
                   std::function<void(std::vector<nlohmann::json>&)> merge);

/// gather() of the client's own request, whose merged parts (`merge`) answer as page_answer().
answer_sink gather_page(gateway& gw, const exchange_ptr& x,
                        std::function<nlohmann::json(std::vector<nlohmann::json>&)> merge);

/// One page of GET /v1/dead-letters from every node's page of it: dead letters in (type, id,
/// created_at, id) order, each once, at most `limit`, none past the least cursor a node
/// answered (a node that stopped early would otherwise lose its rest); `matched` summed,
/// `errors` joined; `next` and the Link say where the next page starts.
nlohmann::json merge_dead_letters(std::vector<nlohmann::json>& parts, int64_t limit);

/// One answer of GET /v1/breakers from every node's: per tool the counts by state summed, and
/// the first `limit` breakers not closed in (tool, type, id) order, each entity once.
nlohmann::json merge_breakers(std::vector<nlohmann::json>& parts, int64_t limit);

/// One page of GET /v1/entities (in key order) from every node's (each an array of the first
/// `limit` after the cursor): in (type, id) order, each entity once, at most `limit`; `more`
/// when a node had a full page. Null when a part is not an array of entities.
nlohmann::json merge_by_key(std::vector<nlohmann::json>& parts, int64_t limit, bool& more);

/// One page of GET /v1/entities?order=last_activity from every node's (each an array): most
/// recently active first, ties in (type, id) order, each entity once, at most `limit`.
nlohmann::json merge_by_activity(std::vector<nlohmann::json>& parts, int64_t limit);

} // namespace factum::http::steps
