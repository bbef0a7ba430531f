// main.cpp: the `factum` executable, the product: `factum serve` hosts the built-in types only
// (a tenant's own server hosts its own: factum::tools::serve_main, docs/embedding.md; the
// examples have an executable of their own, examples/main.cpp). The main thread.
#include "factum/tools/cli.hpp"

int main(int argc, char** argv) {
  factum::entity_registry types;
  factum::add_builtin_types(types);
  return factum::tools::run_cli(argc, argv, std::move(types));
}
