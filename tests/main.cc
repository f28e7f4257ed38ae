// Catch2 entry point for the kvzip test suite.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
