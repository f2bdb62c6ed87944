// Helpers shared by the delivery tests: a bounded wait, a blocking deliver,
// a policy that allows private targets, URL query encoding.
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "conveyor/http_delivery.hpp"

namespace conveyor::http_delivery::testing {

inline constexpr std::chrono::seconds kBound{30};  // generous: a condition, not a timing

// Waits (polling) until pred holds or kBound passes; returns pred().
template <class Pred>
bool eventually(Pred pred) {
  auto until = std::chrono::steady_clock::now() + kBound;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// Submits request and waits (up to kBound) for its outcome.
inline Outcome deliver(Delivery& delivery, Request request) {
  auto promise = std::make_shared<std::promise<Outcome>>();
  auto future = promise->get_future();
  delivery.submit(std::move(request), [promise](Outcome o) { promise->set_value(std::move(o)); });
  if (future.wait_for(kBound) != std::future_status::ready) {
    ADD_FAILURE() << "no outcome within the bound";
    return Outcome{};
  }
  return future.get();
}

inline Policy private_allowed() {
  Policy p;
  p.allow_private = true;
  return p;
}

// Percent-encodes a query parameter value.
inline std::string encoded(const std::string& value) {
  std::string out;
  for (unsigned char c : value) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

}  // namespace conveyor::http_delivery::testing
