// A thread that calls a function every tick until it is destroyed: the ring's
// maintenance (ring_rotator.hpp) and the claim-hint probe (hint_prober.hpp).
#ifndef CONVEYOR_PLUGINS_POSTGRES_QUEUE_PERIODIC_THREAD_HPP
#define CONVEYOR_PLUGINS_POSTGRES_QUEUE_PERIODIC_THREAD_HPP

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace conveyor::pgqueue {

class PeriodicThread {
 public:
  // Starts the thread; the first call comes one tick from now. fn must not
  // throw (an exception would end the process).
  PeriodicThread(std::chrono::milliseconds tick, std::function<void()> fn);
  // Stops the thread, waiting for a call in progress to return. Whatever fn
  // uses must outlive this object: declare it as the owner's last member.
  ~PeriodicThread();
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;

 private:
  const std::chrono::milliseconds tick_;
  const std::function<void()> fn_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // mu_
  std::thread thread_;
};

}  // namespace conveyor::pgqueue

#endif  // CONVEYOR_PLUGINS_POSTGRES_QUEUE_PERIODIC_THREAD_HPP
