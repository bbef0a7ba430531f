// doctest_main.cpp: the doctest runner shared by factum's test binaries.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
