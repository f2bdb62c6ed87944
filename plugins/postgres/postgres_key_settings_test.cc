// ABI 1.5 (key settings, delete_shared_states) in the canonical postgres
// plugin (schema 7): what the shared tests (postgres-common/
// key_settings_test.cc) cannot see from the ABI: a schema 6 database
// migrates with nothing lost, and the new calls work on what was there;
// likewise a schema 7 database to schema 8 (add_shared_states).
#include "key_settings_test_support.hpp"
#include "pg_schema.hpp"

#include <pqxx/pqxx>

namespace conveyor::postgres::test {
namespace {

class PgKeySettingsSchemaTest : public PgTest {
 protected:
  // A ready job of queue at priority, written as the old schema holds it
  // (the plugin's enqueue writes the newest schema's columns): its id.
  int64_t insert_job(const std::string& queue, int32_t priority, int64_t now) {
    const std::string s = "\"" + schema_ + "\"";
    sql("INSERT INTO " + s + ".queues (name) VALUES ('" + queue + "') ON CONFLICT DO NOTHING");
    return sql("INSERT INTO " + s +
               ".jobs (queue, kind, payload, priority, state, max_attempts, run_at, created_at)"
               " VALUES ('" +
               queue + "', 'k', '\\x7b7d'::bytea, " + std::to_string(priority) + ", 1, 3, " +
               std::to_string(now) + ", " + std::to_string(now) + ") RETURNING id")[0][0]
        .as<int64_t>();
  }
};

// A schema 6 database (ABI 1.4) with a job, a queue override, a paused queue
// and shared records, written by this build before it migrates, migrates to
// schema 7: every one of them is as it was (the change marker included),
// key settings start empty and work, and delete_shared_states deletes the
// records written before the migration.
TEST_F(PgKeySettingsSchemaTest, MigrationFromSchema6KeepsEverythingAndAddsKeySettings) {
  {
    pqxx::connection c(dsn_);
    migrate_schema(c, schema_, 6);
  }
  const std::string s = "\"" + schema_ + "\"";
  conveyor_storage* h = open_store({}, /*migrate=*/false);
  ASSERT_NE(h, nullptr);
  const int64_t t = wall_us();
  const int64_t id = insert_job("q", 3, t);
  conveyor_error err{};
  ASSERT_EQ(api_->set_rate_limit_v2(h, str("q"), 2.5, 3, CONVEYOR_SCOPE_FLEET, t, &err),
            CONVEYOR_OK)
      << err.message;
  ASSERT_EQ(pause(h, "held", true), CONVEYOR_OK);
  ASSERT_EQ(swap_shared(h, "ratelimit.key:q/=a", 0, 5).applied, 1);
  ASSERT_EQ(swap_shared(h, "ratelimit.key:q/=b", 0, 500).applied, 1);
  ASSERT_EQ(swap_shared(h, "ratelimit.bucket:q", 0, 7).applied, 1);
  const int64_t m = marker(h);
  ASSERT_TRUE(sql("SELECT to_regclass('" + s + ".key_settings') IS NULL")[0][0].as<bool>());

  ASSERT_EQ(api_->migrate(h, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(sql("SELECT max(version) FROM " + s + ".schema_migrations")[0][0].as<int>(),
            kSchemaVersion);
  EXPECT_EQ(marker(h), m);
  std::vector<LimitCopy> l = limits(h);
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].queue, "q");
  EXPECT_EQ(l[0].rate, 2.5);
  EXPECT_EQ(l[0].burst, 3u);
  EXPECT_EQ(l[0].scope, CONVEYOR_SCOPE_FLEET);
  EXPECT_EQ(queues(h), (std::vector<std::pair<std::string, int32_t>>{{"held", 1}, {"q", 0}}));
  EXPECT_EQ(swap_shared(h, "ratelimit.key:q/=a", -1, 0).value, 5);
  EXPECT_EQ(swap_shared(h, "ratelimit.bucket:q", -1, 0).value, 7);
  EXPECT_TRUE(settings(api_, h).empty());

  set_setting(api_, h, rate_of("q", "a", 1, 1), t);
  set_setting(api_, h, weight_of("q", "a", 2), t + 1);
  EXPECT_NE(marker(h), m);
  std::vector<Setting> got = settings(api_, h);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].fields, static_cast<uint32_t>(CONVEYOR_KEY_FIELDS_ALL));
  EXPECT_EQ(delete_shared(api_, h, "ratelimit.key:", 100, 10), 1u)
      << "a record written before the migration";
  EXPECT_EQ(swap_shared(h, "ratelimit.key:q/=a", -1, 0).version, 0);
  EXPECT_EQ(swap_shared(h, "ratelimit.key:q/=b", -1, 0).value, 500);

  std::vector<JobCopy> claimed = claim(h, "q", 10, 1, t, t + 60'000'000);
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_EQ(claimed[0].id, id);
  EXPECT_EQ(claimed[0].priority, 3);
}

// A schema 7 database (ABI 1.5 before add_shared_states) with a job, a
// queue override, a paused queue, a key setting and shared records (a fleet
// bucket an add has taken from, a record below another's lock), written by
// this build before it migrates, migrates to schema 8: every one of them is
// as it was, and add_shared_states adds to the records written before the
// migration as add_shared_state would.
TEST_F(PgKeySettingsSchemaTest, MigrationFromSchema7KeepsEverythingAndAddsAddSharedStates) {
  {
    pqxx::connection c(dsn_);
    migrate_schema(c, schema_, 7);
  }
  const std::string s = "\"" + schema_ + "\"";
  conveyor_storage* h = open_store({}, /*migrate=*/false);
  ASSERT_NE(h, nullptr);
  const int64_t t = wall_us();
  const int64_t id = insert_job("q", 3, t);
  conveyor_error err{};
  ASSERT_EQ(api_->set_rate_limit_v2(h, str("q"), 2.5, 3, CONVEYOR_SCOPE_FLEET, t, &err),
            CONVEYOR_OK)
      << err.message;
  ASSERT_EQ(pause(h, "held", true), CONVEYOR_OK);
  set_setting(api_, h, weight_of("q", "a", 2), t);
  ASSERT_EQ(add_shared(h, "ratelimit.key:q/=a", 0, 0, 100, 10, 1, 3).count, 3u);
  ASSERT_EQ(swap_shared(h, "ratelimit.bucket:q", 0, 7).applied, 1);
  const int64_t m = marker(h);
  const int64_t sequences =
      sql("SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
          " WHERE n.nspname = '" +
          schema_ + "' AND c.relkind = 'S'")[0][0]
          .as<int64_t>();
  ASSERT_TRUE(sql("SELECT to_regproc('" + s + ".add_shared_states') IS NULL")[0][0].as<bool>());

  ASSERT_EQ(api_->migrate(h, &err), CONVEYOR_OK) << err.message;
  EXPECT_EQ(sql("SELECT max(version) FROM " + s + ".schema_migrations")[0][0].as<int>(),
            kSchemaVersion);
  EXPECT_GE(kSchemaVersion, 8);
  EXPECT_EQ(marker(h), m);
  EXPECT_EQ(sql("SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = '" +
                schema_ + "' AND c.relkind = 'S'")[0][0]
                .as<int64_t>(),
            sequences);
  std::vector<LimitCopy> l = limits(h);
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].scope, CONVEYOR_SCOPE_FLEET);
  EXPECT_EQ(queues(h), (std::vector<std::pair<std::string, int32_t>>{{"held", 1}, {"q", 0}}));
  EXPECT_EQ(settings(api_, h).size(), 1u);
  EXPECT_EQ(swap_shared(h, "ratelimit.key:q/=a", -1, 0).value, 30);
  EXPECT_EQ(swap_shared(h, "ratelimit.bucket:q", -1, 0).value, 7);

  const std::vector<KeyedAdd> adds = {{"ratelimit.key:q/=a", 0, 0, 100, 10, 1, 2},
                                      {"ratelimit.bucket:q", 0, 0, 100, 1, 1, 1},
                                      {"ratelimit.key:q/=new", 0, 0, 100, 50, 1, 5}};
  std::vector<SharedAdded> got = add_many(api_, h, adds);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].version, 2);
  EXPECT_EQ(got[0].value, 50);
  EXPECT_EQ(got[0].count, 2u);
  EXPECT_EQ(got[1].version, 2);
  EXPECT_EQ(got[1].value, 8);
  EXPECT_EQ(got[1].count, 1u);
  EXPECT_EQ(got[2].version, 1);
  EXPECT_EQ(got[2].value, 100);
  EXPECT_EQ(got[2].count, 2u);

  std::vector<JobCopy> claimed = claim(h, "q", 10, 1, t, t + 60'000'000);
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_EQ(claimed[0].id, id);
}

}  // namespace
}  // namespace conveyor::postgres::test
