// libconveyor-bench-trivial.so: TrivialStorage behind the C ABI.
#include "trivial_storage.hpp"

CONVEYOR_EXPORT_STORAGE_PLUGIN(conveyor::bench::TrivialStorage, "bench-trivial", "0.1.0",
                               CONVEYOR_KIND_CANONICAL, 0)
