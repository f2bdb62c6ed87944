// Settings of keys made at run time (ABI 1.5; schema 6, the key_settings
// table): set_key_setting, delete_key_setting and list_key_settings. Like a
// queue's rate-limit override, a change moves the change marker in the same
// transaction, so other handles and processes read the settings again (and
// wait_for_notification reports RATE_LIMITS).
#include <string>
#include <string_view>
#include <vector>

#include "arguments.hpp"
#include "change_marker.hpp"
#include "sqlite_storage.hpp"
#include "values.hpp"

namespace conveyor::sqlite {
namespace {

using sdk::Error;

// What the statements rely on (the adapter has checked the rest).
void require_fields(uint32_t fields, const char* op) {
  if (fields == 0 || (fields & ~CONVEYOR_KEY_FIELDS_ALL) != 0)
    throw Error(CONVEYOR_E_INVALID, std::string(op) + ": fields is " + std::to_string(fields) +
                                        ", not a non-empty mask of CONVEYOR_KEY_FIELD_*");
}

// Binds (queue, target, key) as ?1, ?2, ?3.
void bind_target(SQLite::Statement& st, std::string_view queue, int32_t target,
                 std::string_view key) {
  bind_text(st, 1, queue);
  st.bind(2, target);
  bind_text(st, 3, key);
}

}  // namespace

void SqliteStorage::set_key_setting(const sdk::KeySetting& setting, int64_t now_us) {
  require_queue(setting.queue, "set_key_setting");
  require_fields(setting.fields, "set_key_setting");
  const bool rate = (setting.fields & CONVEYOR_KEY_FIELD_RATE) != 0;
  const bool weight = (setting.fields & CONVEYOR_KEY_FIELD_WEIGHT) != 0;
  db_.write_txn("set_key_setting", [&](Connection& c) {
    {
      SQLite::Statement& st = c.get<sql::kUpsertKeySetting>();
      ResetOnExit reset(st);
      bind_target(st, setting.queue, setting.target, setting.key);
      st.bind(4, static_cast<int64_t>(setting.fields));
      // A field not named is stored as 0 in a new row (and not written
      // over in an existing one).
      st.bind(5, rate ? setting.rate_per_sec : 0.0);
      st.bind(6, static_cast<int64_t>(rate ? setting.burst : 0));
      st.bind(7, rate ? setting.scope : 0);
      st.bind(8, static_cast<int64_t>(weight ? setting.weight : 0));
      st.bind(9, static_cast<int64_t>(now_us));
      st.exec();
    }
    bump_change_marker(c);
  });
}

bool SqliteStorage::delete_key_setting(std::string_view queue, int32_t target, std::string_view key,
                                       uint32_t fields) {
  require_queue(queue, "delete_key_setting");
  require_fields(fields, "delete_key_setting");
  bool cleared = false;
  db_.write_txn("delete_key_setting", [&](Connection& c) {
    cleared = false;  // a retried transaction starts again
    bool emptied = false;
    {
      SQLite::Statement& st = c.get<sql::kClearKeySetting>();
      ResetOnExit reset(st);
      bind_target(st, queue, target, key);
      st.bind(4, static_cast<int64_t>(fields));
      if (st.executeStep()) {
        cleared = true;
        emptied = st.getColumn(0).getInt64() == 0;
      }
    }
    if (!cleared) return;  // none of those fields was stored: nothing changes
    if (emptied) {
      SQLite::Statement& st = c.get<sql::kDeleteEmptyKeySetting>();
      ResetOnExit reset(st);
      bind_target(st, queue, target, key);
      st.exec();
    }
    bump_change_marker(c);
  });
  return cleared;
}

void SqliteStorage::list_key_settings(const sdk::KeySettingSink& sink) {
  std::vector<sdk::KeySetting> rows;
  db_.read("list_key_settings", [&](Connection& c) {
    rows.clear();
    SQLite::Statement& st = c.get<sql::kListKeySettings>();
    ResetOnExit reset(st);
    while (st.executeStep()) {
      sdk::KeySetting& k = rows.emplace_back();
      k.queue = column_text(st, 0);
      k.target = st.getColumn(1).getInt();
      k.key = column_text(st, 2);
      k.fields = static_cast<uint32_t>(st.getColumn(3).getInt64());
      k.rate_per_sec = st.getColumn(4).getDouble();
      k.burst = static_cast<uint32_t>(st.getColumn(5).getInt64());
      k.scope = st.getColumn(6).getInt();
      k.weight = static_cast<uint32_t>(st.getColumn(7).getInt64());
      k.updated_at = st.getColumn(8).getInt64();
    }
  });
  // After the read ended; view() reports the fields stored and 0 in the others.
  for (const sdk::KeySetting& k : rows) sink(k.view());
}

}  // namespace conveyor::sqlite
