// factum/storage/status.hpp: the path installed before status and result<T> had a header of
// their own; kept for programs that include it (docs/embedding.md). Any thread.
#pragma once
#include "factum/error/status.hpp"
