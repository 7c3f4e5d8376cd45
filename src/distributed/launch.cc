// distributed::init / finalize / world: reads the launch environment, picks the engine, and
// keeps the one communicator of this process (dist::world()).
#include "distributed/launch.h"

#include <cerrno>
#include <cstdlib>
#include <optional>

#include "tensorgrad/distributed.h"
#include "tensorgrad/errors.h"
#include "util/switches.h"

namespace tg::dist {
namespace {

using env::Switch;

[[noreturn]] void launch_fail(const std::string& message) {
  throw DistributedError("[distributed::init] " + message);
}

/// The variable as an integer in [lo, hi], nullopt when unset; anything else is an error.
std::optional<int> integer(Switch s, int lo, int hi, const std::string& what) {
  if (!env::is_set(s)) return std::nullopt;
  const std::string v = env::value(s);
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (errno != 0 || end == v.c_str() || *end != '\0' || n < lo || n > hi)
    launch_fail(std::string(env::info(s).name) + "='" + v + "' is not " + what);
  return static_cast<int>(n);
}

/// The first of `names` that is set, with its value.
std::optional<int> first_of(std::initializer_list<Switch> names, int lo, const std::string& what,
                            const char** which) {
  for (Switch s : names)
    if (env::is_set(s)) {
      *which = env::info(s).name;
      return integer(s, lo, 1 << 30, what);
    }
  return std::nullopt;
}

struct State {
  distributed::World world;
  std::unique_ptr<Communicator> comm;
};
// Made by init(), destroyed only by finalize(): never by a static destructor at exit, when the
// CUDA driver or MPI may already be gone.
State* state = nullptr;

}  // namespace

void Communicator::all_reduce_host_f64(const double*, double*, int64_t) {
  throw Error(std::string("[distributed] the ") + name() + " engine does not reduce f64 in host memory");
}

void Communicator::reduce_scatter_host(const float*, float*, int64_t) {
  throw Error(std::string("[distributed] the ") + name() + " engine does not reduce-scatter host memory");
}
void Communicator::reduce_scatter_host_f64(const double*, double*, int64_t) {
  throw Error(std::string("[distributed] the ") + name() + " engine does not reduce-scatter host memory");
}
void Communicator::all_gather_host(const float*, float*, int64_t) {
  throw Error(std::string("[distributed] the ") + name() + " engine does not all-gather host memory");
}
void Communicator::all_gather_host_f64(const double*, double*, int64_t) {
  throw Error(std::string("[distributed] the ") + name() + " engine does not all-gather host memory");
}

LaunchEnv read_launch_env() {
  LaunchEnv e;
  const bool torchrun = env::is_set(Switch::kRank) || env::is_set(Switch::kWorldSize) ||
                        env::is_set(Switch::kLocalRank) || env::is_set(Switch::kMasterAddr) ||
                        env::is_set(Switch::kMasterPort);
  e.by_mpi = env::is_set(Switch::kOmpiSize) || env::is_set(Switch::kOmpiRank) ||
             env::is_set(Switch::kPmiSize) || env::is_set(Switch::kPmiRank);
  e.launched = torchrun || e.by_mpi;
  if (!e.launched) return e;
  const char* rank_name = "RANK";
  const char* size_name = "WORLD_SIZE";
  const std::optional<int> rank = first_of({Switch::kRank, Switch::kOmpiRank, Switch::kPmiRank}, 0,
                                           "a rank (an integer >= 0)", &rank_name);
  const std::optional<int> size = first_of({Switch::kWorldSize, Switch::kOmpiSize, Switch::kPmiSize}, 1,
                                           "a number of processes (an integer >= 1)", &size_name);
  const std::string launch_help =
      " (torchrun-style launches set RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; mpirun sets "
      "its own)";
  if (!size)
    launch_fail("WORLD_SIZE is not set, but " + std::string(rank ? rank_name : "another launch variable") +
                " is" + launch_help);
  if (!rank) launch_fail("RANK is not set, but " + std::string(size_name) + " is" + launch_help);
  if (*rank >= *size)
    launch_fail(std::string(rank_name) + "=" + std::to_string(*rank) + " is not below " + size_name + "=" +
                std::to_string(*size));
  e.rank = *rank;
  e.size = *size;
  const char* local_name = "LOCAL_RANK";
  e.local_rank =
      first_of({Switch::kLocalRank, Switch::kOmpiLocalRank}, 0, "a rank (an integer >= 0)", &local_name)
          .value_or(-1);
  if (env::is_set(Switch::kMasterAddr)) e.master_addr = env::value(Switch::kMasterAddr);
  e.master_port = integer(Switch::kMasterPort, 1, 65535, "a TCP port (1-65535)").value_or(0);
  return e;
}

double timeout_seconds(double fallback) {
  if (!env::is_set(Switch::kDistTimeout)) {
    if (!(fallback > 0))
      launch_fail("InitOptions::timeout_s = " + std::to_string(fallback) + " is not a positive number");
    return fallback;
  }
  const std::string v = env::value(Switch::kDistTimeout);
  char* end = nullptr;
  const double t = std::strtod(v.c_str(), &end);
  if (end == v.c_str() || *end != '\0' || !(t > 0) || t > 1e9)
    launch_fail("TG_DIST_TIMEOUT='" + v + "' is not a positive number of seconds");
  return t;
}

Communicator* world() { return state != nullptr ? state->comm.get() : nullptr; }

}  // namespace tg::dist

namespace tg::distributed {

const World& init(InitOptions options) {
  using dist::launch_fail;
  if (dist::state != nullptr)
    throw Error("[distributed::init] called twice: this process already joined a world of " +
                std::to_string(dist::state->world.size) + " (call finalize() first)");
  if (options.engine != "auto" && options.engine != "mpi" && options.engine != "nccl")
    launch_fail("unknown engine '" + options.engine + "' (mpi, nccl or auto)");
  const double timeout_s = dist::timeout_seconds(options.timeout_s);
  const dist::LaunchEnv env = dist::read_launch_env();
  auto state = std::make_unique<dist::State>();
  World& w = state->world;
  if (env.size > 1) {
    std::string engine = options.engine;
    if (engine == "auto") engine = env.by_mpi && dist::built_with_mpi() ? "mpi" : "nccl";
    if (engine == "mpi") {
      int local_rank = 0;
      state->comm = dist::make_mpi_communicator(env, &local_rank);
      w = World{state->comm->rank(), state->comm->size(), local_rank, "mpi"};
    } else {
      state->comm = dist::make_nccl_communicator(env, timeout_s);
      w = World{env.rank, env.size, env.local_rank, "nccl"};
    }
  }
  dist::state = state.release();
  return dist::state->world;
}

bool initialized() { return dist::state != nullptr; }

const World& world() {
  if (dist::state == nullptr) throw Error("[distributed::world] called before distributed::init()");
  return dist::state->world;
}

void finalize() {
  if (dist::state == nullptr) return;
  const bool mpi = dist::state->world.engine == "mpi";
  delete dist::state;  // the communicator first: MPI must still be running to free its copy
  dist::state = nullptr;
  if (mpi) dist::finalize_mpi();
}

}  // namespace tg::distributed
