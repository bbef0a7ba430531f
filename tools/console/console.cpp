// tools/console/console.cpp: the web console's pages (console.hpp) from the texts CMake embedded
// (tools/console/CMakeLists.txt). Runs once at start, on the main thread.
#include "console.hpp"

#include <string_view>

namespace factum::console {

std::string_view console_index_html();
std::string_view console_app_js();
std::string_view console_app_css();
#ifdef FACTUM_CONSOLE_CHART
std::string_view console_chart_js();
#endif

namespace {

/// The console's policy: its own scripts, styles and API calls only; nothing inline, nothing
/// from elsewhere, no frames, no forms sent anywhere.
constexpr const char* policy =
  "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
  "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

tools::serve_page page(std::string path, std::string_view body, std::string type) {
  tools::serve_page p;
  p.path = std::move(path);
  p.page.body = std::string(body);
  p.page.content_type = std::move(type);
  p.page.content_security_policy = policy;
  return p;
}

} // namespace

std::vector<tools::serve_page> pages() {
#ifdef FACTUM_CONSOLE_CHART
  std::string_view chart = console_chart_js();
#else
  std::string_view chart = "// Chart.js was not embedded: the console draws SVG charts.\n";
#endif
  auto index = page("/console", console_index_html(), "text/html; charset=utf-8");
  index.home = true; // GET / leads here
  return {std::move(index),
          page("/console/app.js", console_app_js(), "text/javascript; charset=utf-8"),
          page("/console/app.css", console_app_css(), "text/css; charset=utf-8"),
          page("/console/chart.js", chart, "text/javascript; charset=utf-8")};
}

} // namespace factum::console
