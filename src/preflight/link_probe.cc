// One node's part of the link check (kiln/preflight/link_probe.h).
#include <kiln/preflight/link_probe.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace kiln::preflight {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Tags of one round's phases; the pair's two ends use the same ones.
uint32_t tag_of(size_t round, uint32_t phase) {
  return static_cast<uint32_t>((round % (1u << 20)) * 4 + phase);
}

}  // namespace

Result<std::vector<LinkMeasurement>> run_link_probe(comm::Communicator& comm,
                                                    const LinkProbeOptions& o) {
  const int me = comm.rank();
  const auto rounds = plan_link_rounds(comm.world_size(), o.random_rounds, o.seed);
  std::vector<LinkMeasurement> mine;
  std::vector<unsigned char> out(o.bytes, static_cast<unsigned char>(me)), in(o.bytes);
  uint64_t ping = 0;
  for (size_t r = 0; r < rounds.size(); ++r) {
    // Lockstep: a pair of this round never shares a link with one of the last.
    KILN_RETURN_IF_ERROR(comm.run(comm::CollectiveArgs::barrier())
                             .with_context("link check round " + std::to_string(r)));
    int peer = -1;
    bool leads = false;
    for (const LinkPair& p : rounds[r]) {
      if (p.a == me) peer = p.b, leads = true;
      if (p.b == me) peer = p.a;
    }
    if (peer < 0) continue;
    const std::string where =
        "link check round " + std::to_string(r) + " with rank " + std::to_string(peer);
    auto send = [&](const void* buf, size_t bytes, uint32_t phase) {
      return comm.run(comm::CollectiveArgs::send_to(buf, bytes, peer, tag_of(r, phase)))
          .with_context(where);
    };
    auto recv = [&](void* buf, size_t bytes, uint32_t phase) {
      return comm.run(comm::CollectiveArgs::recv_from(buf, bytes, peer, tag_of(r, phase)))
          .with_context(where);
    };
    // Latency: the leader's round trips of 8 bytes.
    std::vector<double> rtt;
    for (int i = 0; i < o.pings; ++i) {
      const Clock::time_point t0 = Clock::now();
      if (leads) {
        KILN_RETURN_IF_ERROR(send(&ping, sizeof(ping), 0));
        KILN_RETURN_IF_ERROR(recv(&ping, sizeof(ping), 1));
        rtt.push_back(seconds_since(t0));
      } else {
        KILN_RETURN_IF_ERROR(recv(&ping, sizeof(ping), 0));
        KILN_RETURN_IF_ERROR(send(&ping, sizeof(ping), 1));
      }
    }
    // Bandwidth each way in turn, the best of `iters`; the slower direction is the link's.
    double best_ab = 1e30, best_ba = 1e30;
    for (int i = 0; i < o.iters; ++i) {
      for (int dir = 0; dir < 2; ++dir) {
        const bool sending = (dir == 0) == leads;
        const Clock::time_point t0 = Clock::now();
        KILN_RETURN_IF_ERROR(sending ? send(out.data(), out.size(), 2)
                                     : recv(in.data(), in.size(), 2));
        // The receiver's clock stops when the last byte is in; it tells the sender, whose
        // figure then covers delivery, not only the hand-off to its socket.
        if (sending) {
          KILN_RETURN_IF_ERROR(recv(&ping, sizeof(ping), 3));
          double& best = dir == 0 ? best_ab : best_ba;
          best = std::min(best, seconds_since(t0));
        } else {
          KILN_RETURN_IF_ERROR(send(&ping, sizeof(ping), 3));
        }
      }
    }
    if (!leads) {
      // The leader needs the time of the direction it received; its own clock has it too, but
      // the acknowledgement above already made each direction's time the sender's: send ours.
      double t = best_ba;
      KILN_RETURN_IF_ERROR(send(&t, sizeof(t), 1));
      continue;
    }
    double their = 0;
    KILN_RETURN_IF_ERROR(recv(&their, sizeof(their), 1));
    const double slowest = std::max(best_ab, their);
    std::sort(rtt.begin(), rtt.end());
    LinkMeasurement m;
    m.a = me;
    m.b = peer;
    m.gbps = slowest > 0 ? static_cast<double>(o.bytes) * 8 / slowest / 1e9 : 0;
    m.latency_us = rtt.empty() ? 0 : rtt[rtt.size() / 2] / 2 * 1e6;
    mine.push_back(m);
  }
  return mine;
}

}  // namespace kiln::preflight
