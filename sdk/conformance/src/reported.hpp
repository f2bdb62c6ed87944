// What a plugin reports through callbacks (jobs, queue stats, rate limits,
// queues, notifications, key settings), as the host binding copied it, and the rules
// storage_plugin.h sets for those values. A broken rule is described in
// `problems`; the caller turns each into a test failure.
#pragma once

#include <conveyor/storage_plugin.h>
#include <conveyor/host/plugin_binding.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace conveyor::conformance {

// The host binding's copies (conveyor/host/plugin_binding.hpp), struct_size
// and reserved fields as the plugin reported them.
using JobCopy = host::JobCopy;
using StatsCopy = host::StatsCopy;
using LimitCopy = host::LimitCopy;
using QueueCopy = host::QueueCopy;
using NotificationCopy = host::NotificationCopy;
using ReadyKeyCopy = host::ReadyKeyCopy;
using KeySettingCopy = host::KeySettingCopy;

// The rules storage_plugin.h sets for each reported value (beyond the form
// the binding checks while copying); a broken one is appended to problems.
void check_job(const JobCopy& job, std::vector<std::string>& problems);
void check_stats(const StatsCopy& stats, std::vector<std::string>& problems);
void check_limit(const LimitCopy& limit, std::vector<std::string>& problems);
void check_queue(const QueueCopy& queue, std::vector<std::string>& problems);
void check_notification(const NotificationCopy& note, std::vector<std::string>& problems);
void check_key_setting(const KeySettingCopy& setting, std::vector<std::string>& problems);

// "CONVEYOR_JOB_RUNNING (3)", "CONVEYOR_E_LEASE_LOST (3)", ...
std::string state_name(int32_t state);
std::string status_name(int32_t status);

}  // namespace conveyor::conformance
