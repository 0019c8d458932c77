// Named constructors of CollectiveArgs and the names of kinds and algorithms.
#include <kiln/comm/communicator.h>

#include <array>
#include <string>

namespace kiln::comm {
namespace {
constexpr std::array<std::string_view, 9> kOpNames = {"allreduce", "reduce_scatter", "allgather",
                                                      "broadcast", "reduce",         "all_to_all",
                                                      "barrier",   "send",           "recv"};
}  // namespace

std::string_view op_kind_name(OpKind kind) {
  return kOpNames[static_cast<int>(kind)];
}

std::string_view algorithm_name(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kRing: return "ring";
    case Algorithm::kRecursiveDoubling: return "rd";
    case Algorithm::kHierarchical: return "hier";
  }
  return "?";
}

Result<Algorithm> parse_algorithm(std::string_view name) {
  for (Algorithm a : {Algorithm::kAuto, Algorithm::kRing, Algorithm::kRecursiveDoubling,
                      Algorithm::kHierarchical}) {
    if (algorithm_name(a) == name) return a;
  }
  return Status::invalid_argument("unknown algorithm '" + std::string(name) +
                                  "' (expected auto, ring, rd or hier)");
}

CollectiveArgs CollectiveArgs::allreduce(const void* send, void* recv, size_t count, DataType dtype,
                                         ReduceOp op) {
  CollectiveArgs a;
  a.kind = OpKind::kAllreduce;
  a.send = send;
  a.recv = recv;
  a.count = count;
  a.dtype = dtype;
  a.op = op;
  return a;
}

CollectiveArgs CollectiveArgs::reduce_scatter(const void* send, void* recv, size_t count,
                                              DataType dtype, ReduceOp op) {
  CollectiveArgs a = allreduce(send, recv, count, dtype, op);
  a.kind = OpKind::kReduceScatter;
  return a;
}

CollectiveArgs CollectiveArgs::allgather(const void* send, void* recv, size_t count,
                                         DataType dtype) {
  CollectiveArgs a;
  a.kind = OpKind::kAllgather;
  a.send = send;
  a.recv = recv;
  a.count = count;
  a.dtype = dtype;
  return a;
}

CollectiveArgs CollectiveArgs::broadcast(void* buffer, size_t count, DataType dtype, int root) {
  CollectiveArgs a;
  a.kind = OpKind::kBroadcast;
  a.send = buffer;
  a.recv = buffer;
  a.count = count;
  a.dtype = dtype;
  a.root = root;
  return a;
}

CollectiveArgs CollectiveArgs::reduce(const void* send, void* recv, size_t count, DataType dtype,
                                      ReduceOp op, int root) {
  CollectiveArgs a = allreduce(send, recv, count, dtype, op);
  a.kind = OpKind::kReduce;
  a.root = root;
  return a;
}

CollectiveArgs CollectiveArgs::all_to_all(const void* send, void* recv, size_t count,
                                          DataType dtype) {
  CollectiveArgs a = allgather(send, recv, count, dtype);
  a.kind = OpKind::kAllToAll;
  return a;
}

CollectiveArgs CollectiveArgs::barrier() {
  return CollectiveArgs();
}

CollectiveArgs CollectiveArgs::send_to(const void* buffer, size_t bytes, int peer, uint32_t tag) {
  CollectiveArgs a;
  a.kind = OpKind::kSend;
  a.send = buffer;
  a.count = bytes;
  a.peer = peer;
  a.tag = tag;
  return a;
}

CollectiveArgs CollectiveArgs::recv_from(void* buffer, size_t bytes, int peer, uint32_t tag) {
  CollectiveArgs a;
  a.kind = OpKind::kRecv;
  a.recv = buffer;
  a.count = bytes;
  a.peer = peer;
  a.tag = tag;
  return a;
}

}  // namespace kiln::comm
