// The environment kiln_comm reads, in one place: the only getenv of the library is here
// (process_env()), and the tunables are parsed into a CommEnv with errors that name the variable,
// its value and what is accepted.
//
//   KILN_COMM_ISA    scalar | avx2 | avx512: the ISA of the reduction kernels. Unset or empty:
//                    the best this CPU runs. One above what the CPU runs is an error.
//   KILN_COMM_ADDR   the IPv4 address, or the name of an interface ("eth0"), that this rank's TCP
//                    links bind and advertise. Unset: the address the host name resolves to.
//                    CommOptions::tcp_interface (`--iface`) wins over it. LocalJob sets it to
//                    127.0.0.1 for its ranks, which all run on this machine. Empty: unset.
//   KILN_COMM_SPIN_US, KILN_COMM_YIELD_US
//                    how long a waiting op spins, then yields, before it sleeps, in whole
//                    microseconds [0, 1000000]; unset: chosen from where the ranks run
//                    (transport/wait_policy.h).
//   KILN_COMM_PROFILE
//                    where this machine's measured profile is cached (kiln/comm/machine_profile.h),
//                    from which the spin window and the shared-memory link cost are chosen;
//                    `off`: use the built-in constants instead. Unset or empty: the default
//                    cache path (default_machine_profile_path).
//
// The rank's identity (KILN_RANK, KILN_STORE_ADDR, ...) is parsed by bootstrap.h's
// rank_environment(), which reads it through process_env() as well.
//
// Communicator::create parses CommEnv before it builds anything, so a bad value is an error of
// the communicator's creation, never a failure inside a collective.
#ifndef KILN_COMM_COMM_ENV_H_
#define KILN_COMM_COMM_ENV_H_

#include <cstdint>
#include <optional>
#include <string>

#include <kiln/base/cpu.h>
#include <kiln/base/result.h>
#include <kiln/comm/bootstrap.h>

namespace kiln::comm {

struct CommEnv {
  std::optional<CpuIsa> reduce_isa;  // KILN_COMM_ISA; empty: the best this CPU runs
  std::string tcp_address;           // KILN_COMM_ADDR; empty when unset
  std::optional<int64_t> spin_us;    // KILN_COMM_SPIN_US
  std::optional<int64_t> yield_us;   // KILN_COMM_YIELD_US
  std::string profile_path;          // KILN_COMM_PROFILE or the default; empty: off
};

// The process's environment (getenv), as an EnvLookup.
EnvLookup process_env();

// Parses kiln_comm's tunables from `env` on a CPU whose best ISA is `best`. kInvalidArgument
// naming the variable, its value and the accepted values for an unknown ISA; kNotSupported,
// naming the same, for an ISA this CPU lacks.
Result<CommEnv> parse_comm_env(const EnvLookup& env, CpuIsa best);

// parse_comm_env(process_env(), this CPU's best ISA), parsed anew at each call.
Result<CommEnv> comm_env_from_process();

}  // namespace kiln::comm

#endif  // KILN_COMM_COMM_ENV_H_
