// What every backend shares (see backend.h).
#include "backend/backend.h"

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
  if (comm != nullptr) return;
  for (int32_t id = 0; id < graph.size(); ++id)
    if (graph.node(id).op == ir::Op::kAllReduce)
      throw Error(
          std::string("[") + backend + "] all_reduce %" + std::to_string(id) +
          " needs a communicator (PrepareOptions::communicator): collectives sum over the ranks of one");
}

}  // namespace tg::backend
