// main.cpp: the `factum-examples` executable: the whole `factum` command line, with the example
// entity types (counter, asset, escrow, order_workflow, room) hosted by `factum serve` beside the
// built-in ones, and the chat page at /examples/chat. The README's run command starts it. The
// main thread.
#include "factum/examples/examples.hpp"
#include "factum/tools/cli.hpp"

int main(int argc, char** argv) {
  factum::entity_registry types;
  factum::add_builtin_types(types);
  factum::examples::add_example_types(types);
  // The chat example's page, served when the configuration hosts `room`.
  factum::tools::serve_page chat{"/examples/chat", {}, "room"};
  chat.page.body = std::string(factum::examples::chat_page());
  std::vector<factum::tools::serve_page> pages;
  pages.push_back(std::move(chat));
  return factum::tools::run_cli(argc, argv, std::move(types), std::move(pages));
}
