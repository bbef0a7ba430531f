// sqlite_global.hpp (private to storage/): the process-wide SQLite configuration. Any thread;
// every storage entry point calls it before its first sqlite3_open.
#pragma once

namespace factum::detail {

/// Configures SQLite once per process, before its first use (memory statistics off, no
/// up-front page-cache block per connection) and initializes it. Later calls do nothing. If the
/// embedding program used SQLite first, the configuration is skipped (SQLite refuses it then);
/// factum works either way, with more memory per idle entity.
void sqlite_global_init();

} // namespace factum::detail
