// What every backend shares (see backend.h).
#include "backend/backend.h"

#include "distributed/communicator.h"
#include "tensorgrad/errors.h"

namespace tg::backend {

void require_supported(const Backend& backend, const ir::Graph& graph) {
  for (int32_t id = 0; id < graph.size(); ++id) {
    const ir::Node& n = graph.node(id);
    if (backend.supports(n.op)) continue;
    std::string what = std::string(ir::op_name(n.op)) + " %" + std::to_string(id);
    if (!n.name.empty()) what += " '" + n.name + "'";
    throw Error(std::string("[") + backend.name() + "] this program needs " + what + ", which the " +
                backend.name() + " backend has no kernel for; Device::ref() runs every op");
  }
}

void require_communicator(const ir::Graph& graph, const dist::Communicator* comm, const char* backend) {
  for (int32_t id = 0; comm == nullptr && id < graph.size(); ++id)
    if (ir::is_collective(graph.node(id).op))
      throw Error(
          std::string("[") + backend + "] " + ir::op_name(graph.node(id).op) + " %" + std::to_string(id) +
          " needs a communicator (PrepareOptions::communicator): collectives run over the ranks of one "
          "communicator");
  // The sharding ops were built for a world of attrs.values[0] ranks.
  for (int32_t id = 0; comm != nullptr && id < graph.size(); ++id) {
    const ir::Node& n = graph.node(id);
    if (ir::is_collective(n.op) && n.op != ir::Op::kAllReduce &&
        static_cast<int64_t>(n.attrs.values.at(0)) != comm->size())
      throw Error(std::string("[") + backend + "] " + ir::op_name(n.op) + " %" + std::to_string(id) +
                  " shards over " + std::to_string(static_cast<int64_t>(n.attrs.values.at(0))) +
                  " ranks, but the communicator has " + std::to_string(comm->size()));
  }
}

}  // namespace tg::backend
