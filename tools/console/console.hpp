// tools/console/console.hpp: the web console's pages (docs/console.md) for `factum serve`: the
// page at /console and its assets, compiled into the executable. Called once at start, on the
// main thread.
#pragma once

#include <vector>

#include "factum/tools/serve.hpp"

namespace factum::console {

/// /console, /console/app.js, /console/app.css and, when the build embedded Chart.js,
/// /console/chart.js (else that path answers an empty script: the page draws SVG charts).
/// /console is the home page: GET / leads there.
std::vector<tools::serve_page> pages();

} // namespace factum::console
