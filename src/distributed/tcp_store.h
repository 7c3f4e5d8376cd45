// The control plane of a group of processes started without MPI: TCP connections in a star
// around rank 0, for the rendezvous (handing NCCL's unique id to every rank) and for small
// control exchanges afterwards (all_gather_bytes, barrier). Never tensor data: that goes
// through the collective engine.
//
// Rank 0 listens on MASTER_PORT (every interface, IPv6 and IPv4) and every other rank connects
// to MASTER_ADDR:MASTER_PORT, retrying until the timeout. The connections stay open, so a rank
// that exits shows as a closed socket at the next exchange. Every wait has a deadline
// (poll), so no rank waits forever: each failure is a DistributedError naming the ranks
// involved and host:port.
#pragma once
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tg::dist {

class TcpGroup {
 public:
  /// Returns once all `size` ranks have joined (rank 0 has accepted everyone and said so).
  /// Throws DistributedError when a rank cannot reach rank 0, rank 0 cannot listen (port in
  /// use), ranks disagree on the size, or not everyone joined within `timeout_s`.
  TcpGroup(int rank, int size, std::string host, int port, double timeout_s);
  ~TcpGroup();
  TcpGroup(const TcpGroup&) = delete;
  TcpGroup& operator=(const TcpGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// Rank 0's `bytes` bytes of `data` copied into every other rank's `data`.
  void broadcast(void* data, int64_t bytes);
  /// out (bytes · size) = every rank's `bytes` bytes of `in`, in rank order.
  void all_gather(const void* in, void* out, int64_t bytes);
  void barrier();

 private:
  using Clock = std::chrono::steady_clock;
  enum class Kind : uint32_t { kWelcome = 1, kBroadcast, kAllGather, kBarrier };
  struct Header {
    uint32_t magic = 0;
    Kind kind{};
    int32_t rank = 0, size = 0;  // the sender's
    uint64_t bytes = 0;          // payload bytes that follow
  };

  static const char* kind_name(Kind kind);
  Clock::time_point deadline() const;
  std::string where() const;  // "host:port"
  std::string seconds() const;
  void listen_and_accept();
  void connect_to_rank0();
  /// Sends (header, payload) to `peer_rank` over `fd`.
  void send_to(int fd, int peer_rank, const Header& h, const void* payload, Clock::time_point until,
               const char* what);
  /// Rank 0: a header and `bytes` payload bytes from every other rank (into out + r · bytes
  /// when `gather`), waiting on all of them at once so a dead rank is named at once.
  void receive_from_all(Kind kind, uint8_t* out, uint64_t bytes, bool gather, const char* what);
  /// Ranks > 0: a header of `kind` and its `bytes` payload bytes from rank 0, by `until`
  /// (default: the timeout from now).
  void receive_from_rank0(Kind kind, void* out, uint64_t bytes, const char* what,
                          std::optional<Clock::time_point> until = std::nullopt);
  /// all_gather and barrier: every rank's `bytes` bytes to rank 0, then (all_gather) the
  /// gathered bytes from rank 0 to everyone.
  void exchange(Kind kind, const void* in, void* out, uint64_t bytes, const char* what);

  int rank_, size_;
  std::string host_;
  int port_;
  double timeout_s_;
  std::vector<int> fds_;  // rank 0: fds_[r] is rank r's socket (fds_[0] = -1); others: fds_[0]
};

}  // namespace tg::dist
