// Catch2's main, compiled once per test binary.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
