// A joining process and the run's end, on a real store (a TCPStore server
// in this process, the joiner's client beside it): a ticket taken after
// rank 0 counted the tickets is told why the run ended, at once, as the
// run's answer (not_taken_in, not the store's loss); and rank 0's answer
// to a joiner it counted is read before rank 0 goes on to close the store.
// A joiner that comes before the run opened waits for it; one that asks a
// run that takes none is told why.
#include "runtime/dist/launch/join.hpp"

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

// A coordinator just started (a standby's, after a takeover) opens for
// joiners once its first generation formed: a joiner that comes first
// waits for it, then takes its ticket.
TEST(Join, AJoinerThatComesBeforeTheRunOpensWaitsForIt) {
  kv_store_ptr host = host_store(0, 5000ms);
  kv_store_ptr joiner = open_client_store("127.0.0.1", host->port(), 5000ms);
  std::vector<std::string> said;
  auto joined = std::async(std::launch::async, [&] {
    try {
      join_running(*joiner, kPrefix, "digest", "127.0.0.1:" + std::to_string(host->port()),
                   [&said](const std::string& s) { said.push_back(s); }, 30000ms);
      return std::string("taken in");
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
  });
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(joiners_so_far(*host, kPrefix), 0) << "a ticket before the run opened";
  open_for_joiners(*host, kPrefix, "digest", 2, false);
  while (joiners_so_far(*host, kPrefix) < 1) std::this_thread::sleep_for(5ms);
  close_to_joiners(*host, kPrefix, kWhy);
  turn_away_joiners(*host, kPrefix, {2}, kWhy, 30000ms);
  EXPECT_EQ(joined.get(), "RANK 2 was not taken in: " + kWhy);
  ASSERT_EQ(said.size(), 2u);
  EXPECT_EQ(said[0], "the run at 127.0.0.1:" + std::to_string(host->port()) +
                         " has not opened for processes that join yet; waiting for it");
}

// A run that takes no joiners says why at once; one that never opens is
// given up after the bound.
TEST(Join, ARunThatRefusesJoinersSaysWhyAtOnceAndOneThatNeverOpensIsGivenUp) {
  kv_store_ptr host = host_store(0, 5000ms);
  kv_store_ptr joiner = open_client_store("127.0.0.1", host->port(), 5000ms);
  const std::string at = "127.0.0.1:" + std::to_string(host->port());
  try {
    join_running(*joiner, kPrefix, "digest", at, nullptr, 500ms);
    ADD_FAILURE() << "taken in";
  } catch (const config_error& e) {
    EXPECT_EQ(std::string(e.what()), "the run at " + at +
                                         " takes no processes that join (it did not open for them within 500 ms: it "
                                         "has not started, or its config does not set supervision.replace_timeout_s)");
  }
  refuse_joiners(*host, kPrefix, "its config does not set supervision.replace_timeout_s");
  const auto asked = std::chrono::steady_clock::now();
  try {
    join_running(*joiner, kPrefix, "digest", at, nullptr, 30000ms);
    ADD_FAILURE() << "taken in";
  } catch (const config_error& e) {
    EXPECT_EQ(std::string(e.what()), "the run at " + at +
                                         " takes no processes that join: its config does not set "
                                         "supervision.replace_timeout_s");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - asked, 10000ms) << "not at once";
  EXPECT_EQ(joiners_so_far(*host, kPrefix), 0);
}

}  // namespace
}  // namespace actorpipe
