// large_entity.cpp: builds one large entity for the console's measurement
// (bench/console/large_entity.py, docs/console.md "A large entity"): `--facts` facts on the
// `ledger` entity (tenant, id) in `--data`, written through the runtime (so the file, its chain
// and the tenant index are what `factum serve` writes), `--per-call` facts per call of a method
// `fill` that a ledger-shaped type of this program offers (same name and page size as the
// built-in `ledger`, whose file `factum serve` then opens). Durability normal: the build is not
// what is measured. The main thread issues the calls one at a time; they run on CAF workers.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "factum/entities/entity.hpp"
#include "factum/runtime/runtime.hpp"

using namespace factum;

namespace {

/// `fill {"from": N, "count": C}` appends C `note` facts numbered from N in one turn.
class filler final : public entity {
 public:
  nlohmann::json fill(context& ctx, nlohmann::json args) {
    auto from = args.value("from", int64_t{1});
    auto count = args.value("count", int64_t{1});
    int64_t seq = 0;
    for (int64_t i = 0; i < count; ++i) {
      fact_draft d;
      d.type = "note";
      d.data = {{"n", from + i}, {"text", "a fact of a large entity, about 100 bytes of data"}};
      seq = ctx.append(std::move(d)).seq;
    }
    return {{"seq", seq}};
  }
};

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"Builds one ledger entity with many facts for the console's measurement"};
  std::string data, tenant = "acme", id = "big";
  int64_t facts = 1'000'000, per_call = 10'000;
  app.add_option("--data", data, "the data directory (factum serve's data_dir)")->required();
  app.add_option("--tenant", tenant, "the entity's tenant");
  app.add_option("--id", id, "the ledger entity's id");
  app.add_option("--facts", facts, "facts to append")
    ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_option("--per-call", per_call, "facts per call (one turn, one commit)")
    ->check(CLI::Range(int64_t{1}, int64_t{100'000}));
  CLI11_PARSE(app, argc, argv);

  runtime_config cfg;
  cfg.data_dir = data;
  cfg.mode = durability::normal;
  cfg.types.add(
    type_builder<filler>("ledger").method("fill", &filler::fill).page_size(1024).build());
  auto rt = runtime::start(std::move(cfg));
  if (!rt) {
    std::fprintf(stderr, "large_entity: %s\n", rt.error().to_string().c_str());
    return 1;
  }
  auto t0 = std::chrono::steady_clock::now();
  entity_key key{tenant, "ledger", id};
  for (int64_t from = 1; from <= facts; from += per_call) {
    auto n = std::min(per_call, facts - from + 1);
    auto r = (*rt)->call_sync(key, "fill", nlohmann::json{{"from", from}, {"count", n}}.dump());
    if (!r.ok) {
      std::fprintf(stderr, "large_entity: fill at %lld: %s\n", static_cast<long long>(from),
                   r.body.c_str());
      return 1;
    }
  }
  (*rt)->stop();
  auto s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("large_entity: %lld facts on %s/ledger/%s in %.1f s\n", static_cast<long long>(facts),
              tenant.c_str(), id.c_str(), s);
  return 0;
}
