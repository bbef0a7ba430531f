// tcmalloc_tuning.cpp: compiled into each factum executable that links tcmalloc (the
// factum_allocator target, cmake: FACTUM_TCMALLOC; docs/dependencies.md says why). Owns one
// static initializer, run on the main thread before main(), that caps tcmalloc's per-thread
// caches at 4 MiB in all (its default, 32 MiB, added ~9 KiB of RSS per active entity with 3,750
// entities open; 4 MiB kept activations as fast: docs/performance.md, "What the figures
// rest on").
#include <gperftools/malloc_extension_c.h>

namespace {

struct tcmalloc_tuning {
  tcmalloc_tuning() {
    MallocExtension_SetNumericProperty("tcmalloc.max_total_thread_cache_bytes", 4u << 20);
  }
};

const tcmalloc_tuning tuning;

} // namespace
