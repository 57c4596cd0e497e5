// A joining process and the run's end, on a real store (a TCPStore server
// in this process, the joiner's client beside it): a ticket taken after
// rank 0 counted the tickets is told why the run ended, at once, as the
// run's answer (not_taken_in, not the store's loss); and rank 0's answer
// to a joiner it counted is read before rank 0 goes on to close the store.
#include "runtime/dist/join.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "runtime/dist/transport/rendezvous.hpp"

namespace actorpipe {
namespace {

using namespace std::chrono_literals;

const std::string kPrefix = "/worker/attempt_0";
const std::string kWhy = "the run ended (exit code 0) before it re-placed its stages";

TEST(Join, ATicketTakenAfterTheRunClosedIsToldWhyAtOnce) {
  kv_store_ptr host = host_store(0, 5000ms);
  open_for_joiners(*host, kPrefix, "digest", 2, false);
  close_to_joiners(*host, kPrefix, kWhy);
  kv_store_ptr joiner = open_client_store("127.0.0.1", host->port(), 5000ms);
  try {
    join_running(*joiner, kPrefix, "digest", "127.0.0.1:" + std::to_string(host->port()), nullptr);
    ADD_FAILURE() << "the joiner was taken in";
  } catch (const not_taken_in& e) {
    EXPECT_EQ(std::string(e.what()), "RANK 2 was not taken in: " + kWhy);
  }
}

TEST(Join, RankZeroWaitsUntilATurnedAwayJoinerReadItsAnswer) {
  kv_store_ptr host = host_store(0, 5000ms);
  open_for_joiners(*host, kPrefix, "digest", 2, false);
  kv_store_ptr joiner = open_client_store("127.0.0.1", host->port(), 5000ms);
  auto joined = std::async(std::launch::async, [&] {
    try {
      join_running(*joiner, kPrefix, "digest", "127.0.0.1:" + std::to_string(host->port()), nullptr);
      return std::string("taken in");
    } catch (const not_taken_in& e) {
      return std::string(e.what());
    }
  });
  while (joiners_so_far(*host, kPrefix) < 1) std::this_thread::sleep_for(5ms);
  close_to_joiners(*host, kPrefix, kWhy);
  turn_away_joiners(*host, kPrefix, {2}, kWhy, 30000ms);
  // It returned because the joiner read the answer, not at its bound.
  EXPECT_TRUE(host->has(kPrefix + "/actorpipe/join/told/2"));
  EXPECT_EQ(joined.get(), "RANK 2 was not taken in: " + kWhy);
}

}  // namespace
}  // namespace actorpipe
