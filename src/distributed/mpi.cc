// The MPI engine: collectives between CPU processes through the MPI library this build linked
// (TG_HAVE_MPI; CMake's find_package(MPI)). Host memory only. Built without MPI, asking for it
// is a DistributedError that says how to get it.
#include "distributed/launch.h"
#include "tensorgrad/errors.h"

#ifdef TG_HAVE_MPI
// The C interface only: Open MPI's and MPICH's headers otherwise pull in their C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>
#endif

namespace tg::dist {

#ifndef TG_HAVE_MPI

bool built_with_mpi() { return false; }

std::unique_ptr<Communicator> make_mpi_communicator(const LaunchEnv& env, int*) {
  throw DistributedError(
      "[distributed::init] rank " + std::to_string(env.rank) +
      ": engine mpi, but tensorgrad was built without MPI: install libopenmpi-dev and rebuild");
}

void finalize_mpi() {}

#else

namespace {

bool started_mpi = false;  // init() called MPI_Init (so finalize() calls MPI_Finalize)

std::string mpi_message(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(len));
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, int rank, int size) : Communicator(rank, size), comm_(comm) {}
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  Engine engine() const override { return Engine::kMpi; }
  const char* name() const override { return "mpi"; }

  void all_reduce_host(const void* send, void* recv, int64_t count, DType dtype) override {
    if (dtype != DType::kF32 && dtype != DType::kI32)
      throw Error(std::string("[distributed] all_reduce_host: the MPI engine sums f32, f64 or i32, not ") +
                  dtype_name(dtype));
    reduce(send, recv, count, dtype == DType::kF32 ? MPI_FLOAT : MPI_INT32_T, 4);
  }
  void all_reduce_host_f64(const double* send, double* recv, int64_t count) override {
    reduce(send, recv, count, MPI_DOUBLE, 8);
  }

  void reduce_scatter_host(const float* send, float* recv, int64_t count) override {
    reduce_scatter(send, recv, count, MPI_FLOAT, 4);
  }
  void reduce_scatter_host_f64(const double* send, double* recv, int64_t count) override {
    reduce_scatter(send, recv, count, MPI_DOUBLE, 8);
  }
  void all_gather_host(const float* send, float* recv, int64_t count) override {
    all_gather(send, recv, count, MPI_FLOAT, 4);
  }
  void all_gather_host_f64(const double* send, double* recv, int64_t count) override {
    all_gather(send, recv, count, MPI_DOUBLE, 8);
  }

  void all_reduce_device(const void*, void*, int64_t, DType, void*) override {
    device_only("all_reduce_device");
  }
  void reduce_scatter_device(const void*, void*, int64_t, DType, void*) override {
    device_only("reduce_scatter_device");
  }
  void all_gather_device(const void*, void*, int64_t, DType, void*) override {
    device_only("all_gather_device");
  }

  void all_gather_bytes(const void* in, void* out, int64_t bytes) override {
    if (bytes < 0 || bytes > INT_MAX)
      throw Error("[distributed] all_gather_bytes of " + std::to_string(bytes) +
                  " bytes: control exchanges take 0 to 2^31 - 1 bytes per rank");
    check(MPI_Allgather(in, static_cast<int>(bytes), MPI_BYTE, out, static_cast<int>(bytes), MPI_BYTE, comm_),
          "MPI_Allgather");
  }
  void barrier() override { check(MPI_Barrier(comm_), "MPI_Barrier"); }

 private:
  /// MPI counts are ints: larger reductions go in chunks of at most INT_MAX elements.
  void reduce(const void* send, void* recv, int64_t count, MPI_Datatype type, int64_t element_bytes) {
    if (count < 0) throw Error("[distributed] all_reduce_host of " + std::to_string(count) + " elements");
    const bool in_place = send == recv;
    for (int64_t done = 0; done < count;) {
      const int64_t n = std::min<int64_t>(count - done, INT_MAX);
      const int64_t offset = done * element_bytes;
      void* dst = static_cast<char*>(recv) + offset;
      const void* src = in_place ? MPI_IN_PLACE : static_cast<const char*>(send) + offset;
      check(MPI_Allreduce(src, dst, static_cast<int>(n), type, MPI_SUM, comm_), "MPI_Allreduce");
      done += n;
    }
  }
  /// MPI_Reduce_scatter_block in chunks of at most INT_MAX elements per rank: chunk c of this
  /// rank's part is the sum of chunk c of every rank's part, so the chunks are sent through a
  /// staging copy that lays chunk c of every part side by side.
  void reduce_scatter(const void* send, void* recv, int64_t count, MPI_Datatype type, int64_t element_bytes) {
    if (count < 0) throw Error("[distributed] reduce_scatter_host of " + std::to_string(count) + " elements");
    if (count <= INT_MAX) {
      check(MPI_Reduce_scatter_block(send, recv, static_cast<int>(count), type, MPI_SUM, comm_),
            "MPI_Reduce_scatter_block");
      return;
    }
    std::vector<char> staging;
    for (int64_t done = 0; done < count;) {
      const int64_t n = std::min<int64_t>(count - done, INT_MAX);
      staging.resize(static_cast<size_t>(n * element_bytes * size()));
      for (int r = 0; r < size(); ++r)
        std::memcpy(staging.data() + r * n * element_bytes,
                    static_cast<const char*>(send) + (r * count + done) * element_bytes,
                    static_cast<size_t>(n * element_bytes));
      check(MPI_Reduce_scatter_block(staging.data(), static_cast<char*>(recv) + done * element_bytes,
                                     static_cast<int>(n), type, MPI_SUM, comm_),
            "MPI_Reduce_scatter_block");
      done += n;
    }
  }
  /// MPI_Allgather in chunks of at most INT_MAX elements per rank, each gathered into a staging
  /// buffer and copied to its place in every rank's part of recv.
  void all_gather(const void* send, void* recv, int64_t count, MPI_Datatype type, int64_t element_bytes) {
    if (count < 0) throw Error("[distributed] all_gather_host of " + std::to_string(count) + " elements");
    if (count <= INT_MAX) {
      check(MPI_Allgather(send, static_cast<int>(count), type, recv, static_cast<int>(count), type, comm_),
            "MPI_Allgather");
      return;
    }
    std::vector<char> staging;
    for (int64_t done = 0; done < count;) {
      const int64_t n = std::min<int64_t>(count - done, INT_MAX);
      staging.resize(static_cast<size_t>(n * element_bytes * size()));
      check(MPI_Allgather(static_cast<const char*>(send) + done * element_bytes, static_cast<int>(n), type,
                          staging.data(), static_cast<int>(n), type, comm_),
            "MPI_Allgather");
      for (int r = 0; r < size(); ++r)
        std::memcpy(static_cast<char*>(recv) + (r * count + done) * element_bytes,
                    staging.data() + r * n * element_bytes, static_cast<size_t>(n * element_bytes));
      done += n;
    }
  }
  void check(int code, const char* what) const {
    if (code != MPI_SUCCESS)
      throw DistributedError("[distributed] rank " + std::to_string(rank()) + ": " + what +
                             " failed: " + mpi_message(code));
  }
  [[noreturn]] static void device_only(const char* what) {
    throw Error(std::string("[distributed] ") + what +
                ": the MPI engine reduces host memory only (device collectives need the NCCL engine)");
  }

  MPI_Comm comm_;
};

}  // namespace

bool built_with_mpi() { return true; }

std::unique_ptr<Communicator> make_mpi_communicator(const LaunchEnv& env, int* local_rank) {
  const std::string who = "[distributed::init] rank " + std::to_string(env.rank) + ": ";
  int finalized = 0, initialized = 0;
  MPI_Finalized(&finalized);
  if (finalized) throw DistributedError(who + "MPI was finalized in this process and cannot start again");
  MPI_Initialized(&initialized);
  if (!initialized) {
    // Only the thread that called init() makes MPI calls (the kernels' OpenMP threads never do).
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
      throw DistributedError(who + "MPI_Init_thread failed");
    started_mpi = true;
  }
  // A copy of MPI_COMM_WORLD keeps the library's messages apart from the program's own MPI
  // traffic; errors on it come back as codes (thrown as DistributedError) instead of aborting.
  MPI_Comm comm = MPI_COMM_NULL;
  if (MPI_Comm_dup(MPI_COMM_WORLD, &comm) != MPI_SUCCESS) throw DistributedError(who + "MPI_Comm_dup failed");
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  if (size != env.size) {
    MPI_Comm_free(&comm);
    throw DistributedError(who + "MPI sees " + std::to_string(size) +
                           " processes, but the launch variables say " + std::to_string(env.size) +
                           " (engine mpi needs the processes started by mpirun)");
  }
  // The ranks on this host are the ones that can share memory with this one.
  MPI_Comm host = MPI_COMM_NULL;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host);
  MPI_Comm_rank(host, local_rank);
  MPI_Comm_free(&host);
  return std::make_unique<MpiCommunicator>(comm, rank, size);
}

void finalize_mpi() {
  if (!started_mpi) return;
  MPI_Finalize();
  started_mpi = false;
}

#endif

}  // namespace tg::dist
