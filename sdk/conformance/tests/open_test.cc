// The function table, open and migrate.
#include "fixture.hpp"

#include <atomic>
#include <thread>

namespace conveyor::conformance {
namespace {

class Table : public ConformanceTest {};
class Open : public ConformanceTest {};
class Migrate : public ConformanceTest {};

TEST_F(Table, HeaderFieldsAreWellFormed) {
  // The loader already refused missing names, other majors, short tables and
  // NULL required slots; what is left is what it tolerates.
  EXPECT_EQ(info().abi_major, static_cast<uint32_t>(CONVEYOR_ABI_MAJOR));
  EXPECT_GE(info().struct_size, CONVEYOR_PLUGIN_V1_0_SIZE);
  EXPECT_EQ(table().reserved0, 0u) << "storage_plugin.h: \"reserved0; /* zero */\"";
  EXPECT_EQ(table().reserved1, 0u) << "storage_plugin.h: \"reserved1; /* zero */\"";
  if (info().abi_minor <= CONVEYOR_ABI_MINOR) {
    // A kind or capability bit this ABI does not define can only come from a
    // newer minor (the host loads those with a warning).
    EXPECT_TRUE(info().kind == CONVEYOR_KIND_CANONICAL ||
                info().kind == CONVEYOR_KIND_QUEUE_STORAGE)
        << "kind " << info().kind << " is not a CONVEYOR_KIND_* of ABI " << info().abi_major << "."
        << info().abi_minor;
    const uint64_t known = CONVEYOR_CAP_DURABLE | CONVEYOR_CAP_MULTI_PROCESS |
                           CONVEYOR_CAP_MULTI_HOST | CONVEYOR_CAP_NOTIFY |
                           (info().abi_minor >= 3 ? CONVEYOR_CAP_NOTIFY_DUE : 0);
    EXPECT_EQ(info().capabilities & ~known, 0u) << "capabilities has bits ABI " << info().abi_major
                                                << "." << info().abi_minor << " does not define";
  }
  if (has(CONVEYOR_CAP_MULTI_HOST)) {
    EXPECT_TRUE(has(CONVEYOR_CAP_MULTI_PROCESS))
        << "multi-host storage is shared by several processes, so it must advertise "
           "CONVEYOR_CAP_MULTI_PROCESS too";
  }
  if (has(CONVEYOR_CAP_NOTIFY_DUE)) {
    EXPECT_TRUE(has(CONVEYOR_CAP_NOTIFY))
        << "CONVEYOR_CAP_NOTIFY_DUE promises notifications from wait_for_notification, so it "
           "needs CONVEYOR_CAP_NOTIFY too";
  }
}

TEST_F(Open, ReturnsAHandleThatMigrates) {
  conveyor_storage* raw = nullptr;
  Status s = open_raw({}, &raw);
  ASSERT_TRUE(s.ok()) << s << " (options: " << storage_->describe() << ")";
  ASSERT_NE(raw, nullptr) << "open returned CONVEYOR_OK with *out NULL";
  Handle h(plugin_, raw);
  Status m = h.migrate();
  EXPECT_TRUE(m.ok()) << m;
}

TEST_F(Open, RejectsUnknownOptionNamingIt) {
  const std::string key = "conformance_no_such_option";
  char sentinel_target = 0;
  conveyor_storage* const sentinel = reinterpret_cast<conveyor_storage*>(&sentinel_target);
  conveyor_storage* out = sentinel;
  Status s = open_raw({{key, "1"}}, &out);
  if (s.ok() && out != sentinel && out != nullptr) table().close(out);
  EXPECT_STATUS(s.code, CONVEYOR_E_INVALID)
      << s << " (storage_plugin.h open: \"Unknown keys are CONVEYOR_E_INVALID naming the key\")";
  EXPECT_NE(s.message.find(key), std::string::npos)
      << "the error message does not name the unknown key '" << key << "': \"" << s.message << "\"";
  EXPECT_EQ(out, sentinel) << "open changed *out on failure (storage_plugin.h: \"Failure: *out "
                              "untouched\")";
}

TEST_F(Open, CloseOfNullIsANoOp) {
  table().close(nullptr);  // storage_plugin.h close: "NULL is a no-op"; a crash fails the test
  SUCCEED();
}

TEST_F(Migrate, IsIdempotentAndKeepsData) {
  auto h = open();
  const int64_t id = h->add(JobSpec{.queue = "kept"});
  Status again = h->migrate();
  ASSERT_TRUE(again.ok()) << again << " (storage_plugin.h migrate: \"Idempotent\")";
  Status third = h->migrate();
  ASSERT_TRUE(third.ok()) << third;
  EXPECT_EQ(h->job(id, kT0).queue, "kept") << "migrating again lost a job";
}

TEST_F(Migrate, SecondHandleMigratesSharedStorage) {
  CONFORMANCE_REQUIRE(CONVEYOR_CAP_MULTI_PROCESS);
  // What every host start does on storage another process already migrated.
  auto h = open();
  const int64_t id = h->add(JobSpec{.queue = "kept"});
  auto h2 = open();
  EXPECT_EQ(h2->job(id, kT0).queue, "kept");
}

TEST_F(Migrate, ConcurrentMigrationsOnFreshStorageSucceed) {
  CONFORMANCE_REQUIRE(CONVEYOR_CAP_MULTI_PROCESS);
  // storage_plugin.h migrate: "safe when several processes call it at once
  // (exactly one applies each step)". Several handles stand in for processes.
  constexpr int kHandles = 4;
  std::vector<std::unique_ptr<Handle>> handles;
  for (int i = 0; i < kHandles; ++i) handles.push_back(open(/*migrate=*/false));
  std::vector<Status> results(kHandles);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kHandles; ++i)
    threads.emplace_back([&, i] {
      ready.fetch_add(1);
      while (ready.load() < kHandles) std::this_thread::yield();  // start together
      results[i] = handles[i]->migrate();
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < kHandles; ++i)
    EXPECT_TRUE(results[i].ok()) << "handle " << i << ": " << results[i];
  const int64_t id = handles[0]->add(JobSpec{});
  EXPECT_EQ(handles[kHandles - 1]->job(id, kT0).id, id);
}

}  // namespace
}  // namespace conveyor::conformance
