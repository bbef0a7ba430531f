// factum/storage/fact_ids.hpp: the ids of an entity's facts (docs/storage-format.md section 6).
// A fact's id is derived from a prefix of the entity file and the fact's seq: `fct_` + 16 hex
// digits + 12 hex digits of seq. A rollback makes the facts after its bookmark under a new
// prefix, so that an id is never given to two facts in an entity's life: the file keeps every
// prefix it has numbered facts under, each with the seq it began at and the prefix it followed
// (its history), and the facts of the entity as it is now are those of the current prefix's
// lineage. A plain value class: no I/O, no thread of its own (the store owner's, or a copy).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "factum/error/status.hpp"

namespace factum {

/// Characters of a fact-id prefix (`fct_` + 16 hex digits).
inline constexpr size_t fact_id_prefix_size = 20;

/// The id of the fact with seq `seq` under `prefix`.
std::string derived_fact_id(std::string_view prefix, int64_t seq);
/// Whether `p` is `fct_` + 16 lowercase hex digits.
bool valid_fact_id_prefix(std::string_view p);
/// The seq of a derived fact id under `prefix`, or 0 when `id` is not one.
int64_t seq_of_derived_id(std::string_view id, std::string_view prefix);
/// A new random prefix.
std::string new_fact_id_prefix();

/// The prefixes an entity file has numbered facts under.
class fact_id_history {
 public:
  /// One prefix: the facts from `first_seq` on in its lineage are numbered under it; below
  /// `first_seq`, those of the prefix at index `parent` (-1: the facts below are old-style
  /// random ids, or there are none).
  struct epoch {
    std::string prefix;
    int64_t first_seq = 1;
    int64_t parent = -1;
  };

  fact_id_history() = default;
  /// One prefix from `first_seq` (a file that was never rolled back).
  fact_id_history(std::string prefix, int64_t first_seq);
  /// The meta row's text (`fact_id_history`: a JSON array of [prefix, first_seq, parent]),
  /// checked: CORRUPTION says what is wrong with it.
  static result<fact_id_history> parse(std::string_view text);
  std::string to_text() const;

  bool empty() const noexcept { return epochs_.empty(); }
  const std::vector<epoch>& epochs() const noexcept { return epochs_; }
  /// The prefix facts are appended under now (the last one begun).
  const std::string& current() const;
  /// The index of `prefix`, or -1.
  int64_t find(std::string_view prefix) const;

  /// The index of the prefix that numbers seq `seq` in the lineage of the prefix at `from`
  /// (-1: an old-style id, or none).
  int64_t epoch_at(int64_t from, int64_t seq) const;
  /// The prefix of seq `seq` in the current lineage ("" for an old-style id).
  const std::string& prefix_at(int64_t seq) const;
  /// The last seq, at most `seq`, up to which the lineage of the prefix at `from` holds the
  /// same facts as the current one (0 when they differ from the first; `from` -1: unknown).
  int64_t shared_until(int64_t from, int64_t seq) const;

  /// A rollback: the facts from `first_seq` on are numbered under `prefix`, which follows the
  /// prefix the file had (its current one). `known`: the history of the file the rollback
  /// replaces, whose prefixes (those of the facts rolled away too) stay known.
  void begin(std::string prefix, int64_t first_seq, const fact_id_history& known);

 private:
  std::vector<epoch> epochs_;
};

} // namespace factum
