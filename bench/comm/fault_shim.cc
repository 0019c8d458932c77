/* LD_PRELOAD shims that make a peer's allreduce return a wrong f32 result, so that
   `bench/comm/run --self-test` can show each harness's check fails and its exit code is non-zero.

   Built by the driver only for --self-test, in two flavours:
   - KILN_BENCH_SHIM_MPI (with each MPI's compiler wrapper): MPI_Allreduce calls the real one
     through the profiling interface (PMPI_Allreduce), then adds 1 to the last element of a float
     result. Double and int reductions (the harness's own bookkeeping) pass untouched.
   - KILN_BENCH_SHIM_GLOO: gloo::allreduce(const AllreduceOptions&) is declared a friend of
     AllreduceOptions, so this definition may read the output buffer; it calls the real function
     found with dlsym(RTLD_NEXT) and then corrupts the last element of a 4-byte-element result.

   Never linked into a benchmark run: the harness binaries are the ones measured, unchanged. */
#if defined(KILN_BENCH_SHIM_MPI)

#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

extern "C" int MPI_Allreduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op,
                             MPI_Comm comm) {
  const int rc = PMPI_Allreduce(send, recv, count, type, op, comm);
  if (rc == MPI_SUCCESS && type == MPI_FLOAT && count > 0) {
    static_cast<float*>(recv)[count - 1] += 1.0f;
  }
  return rc;
}

#elif defined(KILN_BENCH_SHIM_GLOO)

#include <dlfcn.h>
#include <gloo/allreduce.h>

#include <cstdio>
#include <cstdlib>

namespace gloo {

void allreduce(const AllreduceOptions& opts) {
  using Real = void (*)(const AllreduceOptions&);
  // The mangled name of gloo::allreduce(gloo::AllreduceOptions const&) in libgloo.so.
  static const Real real =
      reinterpret_cast<Real>(dlsym(RTLD_NEXT, "_ZN4gloo9allreduceERKNS_16AllreduceOptionsE"));
  if (real == nullptr) {
    std::fprintf(stderr, "fault_shim: gloo::allreduce not found after the shim\n");
    std::abort();
  }
  real(opts);
  const auto& impl = opts.impl_;
  if (impl.elementSize == sizeof(float) && impl.elements > 0 && !impl.out.empty()) {
    static_cast<float*>(impl.out[0]->ptr)[impl.elements - 1] += 1.0f;
  }
}

}  // namespace gloo

#else
#error "define KILN_BENCH_SHIM_MPI or KILN_BENCH_SHIM_GLOO"
#endif
