/* A valid shared library that is not an rmca plugin: it lacks rmca_plugin_descriptor. */
int some_other_entry_point(void) { return 42; }
