// fact_ids.cpp: fact ids and the history of a file's fact-id prefixes (fact_ids.hpp). A plain
// value class; any thread that owns the value.
#include "factum/storage/fact_ids.hpp"

#include <algorithm>
#include <limits>

#include <nlohmann/json.hpp>

#include "store/store_sql.hpp"

namespace factum {

// -- ids ----------------------------------------------------------------------------------------

std::string derived_fact_id(std::string_view prefix, int64_t seq) {
  std::string out;
  out.reserve(prefix.size() + 12);
  out += prefix;
  detail::append_hex(out, static_cast<uint64_t>(seq), 12);
  return out;
}

bool valid_fact_id_prefix(std::string_view p) {
  if (p.size() != fact_id_prefix_size || p.substr(0, 4) != "fct_")
    return false;
  for (char c : p.substr(4))
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return false;
  return true;
}

int64_t seq_of_derived_id(std::string_view id, std::string_view prefix) {
  if (prefix.size() != fact_id_prefix_size || id.size() != fact_id_prefix_size + 12 ||
      id.substr(0, prefix.size()) != prefix)
    return 0;
  int64_t seq = 0;
  for (char c : id.substr(prefix.size())) {
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0)
      return 0;
    seq = seq * 16 + d;
  }
  return seq;
}

std::string new_fact_id_prefix() {
  std::string prefix = "fct_";
  detail::append_hex(prefix, detail::random_u64(), 16);
  return prefix;
}

// -- the history --------------------------------------------------------------------------------

fact_id_history::fact_id_history(std::string prefix, int64_t first_seq) {
  epochs_.push_back({std::move(prefix), first_seq, -1});
}

result<fact_id_history> fact_id_history::parse(std::string_view text) {
  auto bad = [](const std::string& why) {
    return status{errc::corruption, "meta fact_id_history: " + why};
  };
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_array() || j.empty())
    return bad("not a non-empty JSON array");
  fact_id_history h;
  for (auto& e : j) {
    if (!e.is_array() || e.size() != 3 || !e[0].is_string() || !e[1].is_number_integer() ||
        !e[2].is_number_integer())
      return bad("an entry is not [prefix, first_seq, parent]");
    epoch ep{e[0].get<std::string>(), e[1].get<int64_t>(), e[2].get<int64_t>()};
    auto index = static_cast<int64_t>(h.epochs_.size());
    // A parent is an earlier entry (no cycle), prefixes are unique, seqs start at 1.
    if (!valid_fact_id_prefix(ep.prefix) || ep.first_seq < 1 || ep.parent < -1 ||
        ep.parent >= index || h.find(ep.prefix) >= 0)
      return bad("entry " + std::to_string(index) + " is malformed");
    h.epochs_.push_back(std::move(ep));
  }
  return h;
}

std::string fact_id_history::to_text() const {
  auto out = nlohmann::json::array();
  for (auto& e : epochs_)
    out.push_back({e.prefix, e.first_seq, e.parent});
  return out.dump();
}

const std::string& fact_id_history::current() const {
  static const std::string none;
  return epochs_.empty() ? none : epochs_.back().prefix;
}

int64_t fact_id_history::find(std::string_view prefix) const {
  for (size_t i = 0; i < epochs_.size(); ++i)
    if (epochs_[i].prefix == prefix)
      return static_cast<int64_t>(i);
  return -1;
}

int64_t fact_id_history::epoch_at(int64_t from, int64_t seq) const {
  while (from >= 0 && seq < epochs_[static_cast<size_t>(from)].first_seq)
    from = epochs_[static_cast<size_t>(from)].parent;
  return from;
}

const std::string& fact_id_history::prefix_at(int64_t seq) const {
  static const std::string none;
  auto k = epoch_at(static_cast<int64_t>(epochs_.size()) - 1, seq);
  return k < 0 ? none : epochs_[static_cast<size_t>(k)].prefix;
}

int64_t fact_id_history::shared_until(int64_t from, int64_t seq) const {
  if (from < 0 || from >= static_cast<int64_t>(epochs_.size()))
    return 0;
  auto cur = static_cast<int64_t>(epochs_.size()) - 1;
  // Both lineages change prefix only where some prefix begins: compare them there, in order.
  std::vector<int64_t> starts{1};
  for (auto& e : epochs_)
    starts.push_back(e.first_seq);
  std::sort(starts.begin(), starts.end());
  for (auto s : starts) {
    if (s > seq)
      break;
    if (epoch_at(from, s) != epoch_at(cur, s))
      return s - 1;
  }
  return seq;
}

void fact_id_history::begin(std::string prefix, int64_t first_seq, const fact_id_history& known) {
  auto own = *this;
  fact_id_history merged = known;
  // Every prefix of this file that `known` lacks (the file was rebuilt from an older one), with
  // its parent found again by prefix.
  for (auto& e : own.epochs_)
    if (merged.find(e.prefix) < 0) {
      auto parent =
        e.parent < 0 ? -1 : merged.find(own.epochs_[static_cast<size_t>(e.parent)].prefix);
      merged.epochs_.push_back({e.prefix, e.first_seq, parent});
    }
  merged.epochs_.push_back({std::move(prefix), first_seq, merged.find(own.current())});
  *this = std::move(merged);
}

} // namespace factum
