// A wait outside the store (a transfer's future) that a call-off ends: the
// armed key set by another client ends it with forming_aborted, and an
// unarmed store leaves it waiting for its value.
#include "runtime/dist/transport/kv_store.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "runtime/dist/transport/rendezvous.hpp"

namespace actorpipe {
namespace {

using namespace std::chrono_literals;

TEST(WaitUnlessCalledOff, TheArmedKeySetEndsAWaitThatNothingElseWouldEnd) {
  kv_store_ptr host = host_store(0, 5000ms);
  ASSERT_GT(host->port(), 0);
  kv_store_ptr client = open_client_store("127.0.0.1", host->port(), 5000ms);
  client->arm("gen_1/called_off");
  std::promise<int> never;
  std::future<int> f = never.get_future();
  std::thread off([host] {
    std::this_thread::sleep_for(200ms);
    host->set("gen_1/called_off", "rank 2's process went down");
  });
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(wait_unless_called_off(f, client), forming_aborted);
  off.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_TRUE(client->tripped());
  client->arm("");
  // Unarmed, a value that comes is returned.
  std::promise<int> soon;
  std::future<int> g = soon.get_future();
  std::thread give([&soon] {
    std::this_thread::sleep_for(120ms);
    soon.set_value(7);
  });
  EXPECT_EQ(wait_unless_called_off(g, client), 7);
  give.join();
}

}  // namespace
}  // namespace actorpipe
