/* A shared library that exports a function, but not the plugin entry: the
 * loader must say the entry symbol is missing and how to export it. */
#include <conveyor/storage_plugin.h>

CONVEYOR_PLUGIN_EXPORT int conveyor_not_the_entry(void) { return 42; }
