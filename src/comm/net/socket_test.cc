#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "comm/net/socket.h"

namespace kiln::comm::net {
namespace {

TEST(SocketTest, ParsesAddresses) {
  Result<HostPort> a = parse_host_port("node7:29500");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "node7");
  EXPECT_EQ(a->port, 29500);
  Result<HostPort> v6 = parse_host_port("[::1]:80");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->to_string(), "[::1]:80");
  EXPECT_TRUE(parse_host_port("node7").status().is_invalid_argument());
  EXPECT_TRUE(parse_host_port("node7:0").status().is_invalid_argument());
  EXPECT_TRUE(parse_host_port("node7:70000").status().is_invalid_argument());
  EXPECT_TRUE(parse_host_port("node7:12x").status().is_invalid_argument());
}

TEST(SocketTest, ExactTransfersBiggerThanSocketBuffers) {
  int port = 0;
  Result<Fd> listener = listen_tcp("127.0.0.1", 0, 0, 4, &port);
  ASSERT_TRUE(listener.ok()) << listener.status().to_string();
  std::vector<char> sent(8 << 20);
  for (size_t i = 0; i < sent.size(); ++i)
    sent[i] = static_cast<char>(i * 31 + 7);
  std::thread client([&] {
    Result<Fd> fd = connect_tcp({"127.0.0.1", port}, Deadline::after_ms(10'000));
    ASSERT_TRUE(fd.ok()) << fd.status().to_string();
    ASSERT_TRUE(
        write_all(fd->get(), sent.data(), sent.size(), Deadline::after_ms(10'000), "t").ok());
  });
  Result<Fd> conn = accept_tcp(listener->get(), Deadline::after_ms(10'000), nullptr);
  ASSERT_TRUE(conn.ok());
  std::vector<char> got(sent.size());
  ASSERT_TRUE(
      read_exact(conn->get(), got.data(), got.size(), Deadline::after_ms(10'000), "t").ok());
  client.join();
  EXPECT_EQ(std::memcmp(got.data(), sent.data(), sent.size()), 0);
  // The client is gone: the next read sees EOF, named as a closed connection.
  char byte;
  Status s = read_exact(conn->get(), &byte, 1, Deadline::after_ms(10'000), "frame header");
  EXPECT_TRUE(s.is_unavailable());
  EXPECT_NE(s.message().find("frame header: connection closed by peer"), std::string::npos);
}

TEST(SocketTest, ReadTimesOutAtTheDeadline) {
  int port = 0;
  Result<Fd> listener = listen_tcp("127.0.0.1", 0, 0, 4, &port);
  ASSERT_TRUE(listener.ok());
  Result<Fd> fd = connect_tcp({"127.0.0.1", port}, Deadline::after_ms(10'000));
  ASSERT_TRUE(fd.ok());
  char byte;
  Status s = read_exact(fd->get(), &byte, 1, Deadline::after_ms(50), "reply");
  EXPECT_TRUE(s.is_timeout()) << s.to_string();
}

TEST(SocketTest, ConnectRetriesUntilTheServerAppearsThenGivesUp) {
  int port = 0;
  {
    Result<Fd> probe = listen_tcp("127.0.0.1", 0, 0, 1, &port);  // find a free port, release it
    ASSERT_TRUE(probe.ok());
  }
  Status late_status;
  std::thread late_server([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    int bound = 0;
    Result<Fd> listener = listen_tcp("127.0.0.1", port, port, 4, &bound);
    if (!listener.ok()) {
      late_status = listener.status();
      return;
    }
    late_status = accept_tcp(listener->get(), Deadline::after_ms(10'000), nullptr).status();
  });
  Result<Fd> fd = connect_tcp({"127.0.0.1", port}, Deadline::after_ms(10'000));
  late_server.join();
  ASSERT_TRUE(late_status.ok()) << late_status.to_string();
  EXPECT_TRUE(fd.ok()) << fd.status().to_string();

  Result<Fd> nobody = connect_tcp({"127.0.0.1", port}, Deadline::after_ms(100));
  ASSERT_FALSE(nobody.ok());
  EXPECT_TRUE(nobody.status().is_unavailable());
  EXPECT_NE(nobody.status().message().find("127.0.0.1:" + std::to_string(port)), std::string::npos);
  EXPECT_NE(nobody.status().message().find("Connection refused"), std::string::npos);
}

TEST(SocketTest, PortRangeSkipsPortsInUse) {
  int first = 0;
  Result<Fd> a = listen_tcp("127.0.0.1", 0, 0, 1, &first);
  ASSERT_TRUE(a.ok());
  if (first >= 65535) GTEST_SKIP() << "kernel picked the last port";
  int second = 0;
  Result<Fd> b = listen_tcp("127.0.0.1", first, first + 1, 1, &second);
  if (!b.ok()) GTEST_SKIP() << "port after " << first << " is busy too";
  EXPECT_EQ(second, first + 1);
  int third = 0;
  Result<Fd> c = listen_tcp("127.0.0.1", first, first, 1, &third);
  EXPECT_TRUE(c.status().is_io_error());
}

}  // namespace
}  // namespace kiln::comm::net
