// The etcd client against a real 3-member cluster, one member in each of 3
// network namespaces (on loopback where none can be made; Debian's
// etcd-server, started by tests/runtime/dist/coord/spread_cluster.hpp):
// values round-trip, a key is created once, a lease that is not kept
// alive takes its keys with it, one member killed goes unnoticed, two
// killed (no majority) and an address where nothing listens are one-line
// errors within the client's timeout.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "runtime/dist/coord/etcd_client.hpp"
#include "runtime/dist/transport/net_address.hpp"
#include "tests/runtime/dist/coord/etcd_cluster.hpp"
#include "tests/runtime/dist/coord/spread_cluster.hpp"
#include "tests/test_util.hpp"

namespace actorpipe {
namespace {

using testing_util::etcd_cluster;
using clock_type = std::chrono::steady_clock;

#define REQUIRE_ETCD()                                    \
  if (::access(testing_util::etcd_binary(), X_OK) != 0) \
  GTEST_SKIP() << "etcd-server is not installed (scripts/setup.sh installs it): test skipped"

std::filesystem::path cluster_dir() { return testing_util::test_dir("actorpipe_etcd_test") / "cluster"; }

TEST(Base64, RoundTripsEveryLengthAndRefusesWhatIsNotBase64) {
  // RFC 4648's test vectors.
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("foob"), "Zm9vYg==");
  EXPECT_EQ(base64_encode("fooba"), "Zm9vYmE=");
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes += static_cast<char>(i);
  for (size_t n = 0; n <= bytes.size(); n += 37) EXPECT_EQ(base64_decode(base64_encode(bytes.substr(0, n))), bytes.substr(0, n));
  EXPECT_THROW(base64_decode("Zm9"), std::invalid_argument);
  EXPECT_THROW(base64_decode("Zm9*"), std::invalid_argument);
  EXPECT_THROW(base64_decode("Z==v"), std::invalid_argument);
}

TEST(EtcdUrl, ParsesMembersAndNamesWhatDoesNotParse) {
  const auto e = parse_etcd_url("etcd://10.0.0.1:2379,node-b:32379");
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].text(), "10.0.0.1:2379");
  EXPECT_EQ(e[1].text(), "node-b:32379");
  EXPECT_EQ(parse_etcd_url("127.0.0.1:2379").size(), 1u);
  for (const char* bad : {"etcd://", "etcd://host", "etcd://host:", "etcd://:2379", "etcd://h:0", "etcd://h:70000",
                          "etcd://h:23x9", "etcd://a:1,,b:2"})
    EXPECT_THROW(parse_etcd_url(bad), std::invalid_argument) << bad;
}

TEST(EtcdClient, PutGetCreateAndEraseOnThreeMembers) {
  REQUIRE_ETCD();
  testing_util::spread_cluster spread(cluster_dir(), "10.235");
  etcd_cluster& cluster = *spread;
  ASSERT_TRUE(cluster.ok()) << cluster.why();
  etcd_client c(cluster.endpoints());
  std::string binary = "a\0b\xff", holder;
  binary.resize(4);
  c.put("/run/x/record", binary);
  EXPECT_EQ(c.get("/run/x/record"), binary);
  EXPECT_EQ(c.get("/run/x/none"), std::nullopt);
  // Created once: the second caller is told who holds it.
  EXPECT_TRUE(c.create("/run/x/owner", "coordinator 1"));
  EXPECT_FALSE(c.create("/run/x/owner", "coordinator 2", 0, &holder));
  EXPECT_EQ(holder, "coordinator 1");
  // Any member serves what another wrote.
  etcd_client last({cluster.endpoints()[2]});
  EXPECT_EQ(last.get("/run/x/owner"), "coordinator 1");
  EXPECT_TRUE(c.erase("/run/x/owner"));
  EXPECT_FALSE(c.erase("/run/x/owner"));
  EXPECT_TRUE(last.create("/run/x/owner", "coordinator 2"));
}

TEST(EtcdClient, ALeaseNotKeptAliveTakesItsKeysWithIt) {
  REQUIRE_ETCD();
  testing_util::spread_cluster spread(cluster_dir(), "10.235");
  etcd_cluster& cluster = *spread;
  ASSERT_TRUE(cluster.ok()) << cluster.why();
  etcd_client c(cluster.endpoints());
  const int64_t kept = c.grant(2), dropped = c.grant(2);
  ASSERT_NE(kept, 0);
  ASSERT_NE(dropped, kept);
  ASSERT_TRUE(c.create("/run/y/kept", "1", kept));
  ASSERT_TRUE(c.create("/run/y/dropped", "1", dropped));
  // 4 s: twice the TTL. The kept lease is renewed every 0.5 s.
  const auto until = clock_type::now() + std::chrono::seconds(4);
  while (clock_type::now() < until) {
    EXPECT_GT(c.keep_alive(kept), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  EXPECT_EQ(c.get("/run/y/kept"), "1");
  EXPECT_EQ(c.get("/run/y/dropped"), std::nullopt);
  EXPECT_EQ(c.keep_alive(dropped), 0);
  // Another caller may take the expired one's place.
  EXPECT_TRUE(c.create("/run/y/dropped", "2"));
  c.revoke(kept);
  EXPECT_EQ(c.get("/run/y/kept"), std::nullopt);
  EXPECT_THROW(c.revoke(kept), etcd_error);  // "requested lease not found", from the first member asked
}

TEST(EtcdClient, OneMemberKilledGoesUnnoticedTwoAreNoMajorityInOneLine) {
  REQUIRE_ETCD();
  testing_util::spread_cluster spread(cluster_dir(), "10.235");
  etcd_cluster& cluster = *spread;
  ASSERT_TRUE(cluster.ok()) << cluster.why();
  etcd_client c(cluster.endpoints(), std::chrono::milliseconds(2000));
  c.put("/run/z/step", "1");
  cluster.kill(0);  // the member asked first
  // It may have been the leader: the two left elect one (etcd's election
  // timeout is 1 s, more on a loaded machine) before they serve a write.
  // Unnoticed means served, by the next member asked, though not within 2 s.
  etcd_client patient(cluster.endpoints(), std::chrono::milliseconds(10000));
  patient.put("/run/z/step", "2");
  EXPECT_EQ(c.get("/run/z/step"), "2");
  cluster.kill(1);
  const auto t0 = clock_type::now();
  try {
    c.put("/run/z/step", "3");
    ADD_FAILURE() << "a write without a majority was served";
  } catch (const etcd_error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    EXPECT_NE(what.find("no majority"), std::string::npos) << what;
    EXPECT_NE(what.find(cluster.endpoints()[2].text()), std::string::npos) << what;
    std::printf("no majority: %s\n", what.c_str());
  }
  const double took = std::chrono::duration<double>(clock_type::now() - t0).count();
  EXPECT_LT(took, 2.0 + 2.0) << "the client's timeout is 2 s";
}

TEST(EtcdClient, AnAddressWhereNothingListensIsOneLineNamingIt) {
  const uint16_t port = free_port("127.0.0.1");  // free a moment ago: nothing listens there
  etcd_client c({{"127.0.0.1", port}}, std::chrono::milliseconds(1000));
  try {
    c.get("/x");
    ADD_FAILURE() << "an answer from nowhere";
  } catch (const etcd_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "no etcd member answered at 127.0.0.1:" + std::to_string(port) + " (127.0.0.1:" + std::to_string(port) +
                  ": Connection refused)");
  }
}

}  // namespace
}  // namespace actorpipe
