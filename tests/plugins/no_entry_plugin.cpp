// A shared library that is not a Plexus plugin: it exports neither entry point.
extern "C" int plexus_test_unrelated_function() { return 42; }
