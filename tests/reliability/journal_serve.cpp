// journal_serve.cpp: `factum serve` with the test type `three_steps` (tests/support/
// three_steps.hpp) besides the built-in types, for the crash rounds of journaled handlers
// (journal_rounds_driver.cpp). Takes the arguments of `factum serve`, with or without the word
// `serve` first (so that crash_support.hpp's serve_process starts it as it starts `factum`).
// The main thread runs the server; handlers run on the entities' actors.
#include <string>
#include <utility>
#include <vector>

#include "factum/runtime/runtime.hpp"
#include "factum/tools/serve.hpp"
#include "support/three_steps.hpp"

int main(int argc, char** argv) {
  std::vector<char*> args(argv, argv + argc);
  if (args.size() > 1 && std::string(args[1]) == "serve")
    args.erase(args.begin() + 1);
  factum::entity_registry types;
  factum::add_builtin_types(types);
  factum::test::add_three_steps_type(types);
  return factum::tools::serve_main(static_cast<int>(args.size()), args.data(), std::move(types));
}
