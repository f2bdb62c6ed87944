// What the postgres-queue plugin's tests share (besides pg_test_support).
#pragma once

#include "pg_test_support.hpp"

#include <cstdint>

namespace conveyor::pgqueue::test {

using postgres::test::JobCopy;
using postgres::test::leases_of;
using postgres::test::wall_us;

inline constexpr int64_t kSecond = 1'000'000;
inline constexpr int64_t kHour = 3600 * kSecond;

}  // namespace conveyor::pgqueue::test
