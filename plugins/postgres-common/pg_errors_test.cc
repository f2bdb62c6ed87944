// What the plugins say about a failure (no server needed).
#include "pg_errors.hpp"

#include <gtest/gtest.h>

namespace conveyor::postgres {
namespace {

// Behind PgBouncer in transaction mode the plugin's named prepared statement
// meets another session's: the error names the pooler mode and the fix.
TEST(PgErrors, APreparedStatementOfAnotherSessionNamesThePoolerMode) {
  const Failure dup{FailureKind::kInternal,
                    "ERROR: prepared statement \"conveyor_shared_swap\" already exists", "42P05"};
  const std::string text = explain(dup, 60000);
  EXPECT_NE(text.find("pooler in transaction mode"), std::string::npos) << text;
  EXPECT_NE(text.find("session mode"), std::string::npos) << text;
  EXPECT_NE(text.find("conveyor_shared_swap"), std::string::npos) << text;
  const Failure gone{FailureKind::kInternal,
                     "ERROR: prepared statement \"conveyor_claim\" does not exist", "26000"};
  EXPECT_NE(explain(gone, 60000).find("pooler in transaction mode"), std::string::npos);
}

TEST(PgErrors, AStatementTimeoutNamesThePluginOption) {
  const Failure cancelled{FailureKind::kUnavailable,
                          "ERROR: canceling statement due to statement timeout", "57014"};
  EXPECT_EQ(explain(cancelled, 60000),
            "the statement was cancelled by statement_timeout (60000 ms, plugin option "
            "statement_timeout_ms)");
}

}  // namespace
}  // namespace conveyor::postgres
