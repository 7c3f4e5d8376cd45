// TCP control plane of a process group (see tcp_store.h). Sockets are non-blocking; every
// read, write, accept and connect waits in poll() for at most the time left before the
// operation's deadline.
#include "distributed/tcp_store.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <system_error>
#include <thread>

#include "tensorgrad/errors.h"

namespace tg::dist {
namespace {

constexpr uint32_t kMagic = 0x54475256;  // "TGRV": a tensorgrad rendezvous, not a stray client

using Clock = std::chrono::steady_clock;

std::string errno_text(int e) { return std::generic_category().message(e); }

[[noreturn]] void store_fail(const std::string& message) {
  throw DistributedError("[distributed] " + message);
}

/// Milliseconds left before `until` for poll(), at least 0.
int millis_left(Clock::time_point until) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

/// Waits until fd is ready for `events`; false when the deadline passed first.
bool wait_ready(int fd, short events, Clock::time_point until) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, millis_left(until));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) store_fail(std::string("poll failed: ") + errno_text(errno));
  }
}

void set_socket_options(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // small messages, sent at once
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

/// The result of one non-blocking recv() or send(): bytes moved, 0 when it would block, -1 when
/// the peer is gone.
int64_t transfer(int fd, uint8_t* data, size_t n, bool sending) {
  for (;;) {
    const ssize_t r = sending ? ::send(fd, data, n, MSG_NOSIGNAL) : ::recv(fd, data, n, 0);
    if (r > 0) return r;
    if (r == 0) return -1;  // recv: orderly shutdown by the peer
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    return -1;  // ECONNRESET, EPIPE, ...
  }
}

}  // namespace

TcpGroup::TcpGroup(int rank, int size, std::string host, int port, double timeout_s)
    : rank_(rank), size_(size), host_(std::move(host)), port_(port), timeout_s_(timeout_s) {
  fds_.assign(rank == 0 ? static_cast<size_t>(size) : 1, -1);
  try {
    if (rank_ == 0)
      listen_and_accept();
    else
      connect_to_rank0();
  } catch (...) {
    for (int fd : fds_)
      if (fd >= 0) ::close(fd);
    throw;
  }
}

TcpGroup::~TcpGroup() {
  for (int fd : fds_)
    if (fd >= 0) ::close(fd);
}

const char* TcpGroup::kind_name(Kind kind) {
  switch (kind) {
    case Kind::kWelcome: return "the rendezvous";
    case Kind::kBroadcast: return "broadcast";
    case Kind::kAllGather: return "all_gather_bytes";
    case Kind::kBarrier: return "barrier";
  }
  return "an unknown exchange";
}

TcpGroup::Clock::time_point TcpGroup::deadline() const {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
}

std::string TcpGroup::where() const { return host_ + ":" + std::to_string(port_); }

std::string TcpGroup::seconds() const {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f s", timeout_s_);
  return s;
}

void TcpGroup::listen_and_accept() {
  const auto until = deadline();
  // One socket for IPv6 and IPv4 (v4-mapped addresses), on every interface: MASTER_ADDR names
  // this host as the others reach it, which need not be an address it can bind.
  int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_storage addr{};
  socklen_t addr_len = 0;
  if (fd >= 0) {
    const int zero = 0;
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&addr);
    a6->sin6_family = AF_INET6;
    a6->sin6_addr = in6addr_any;
    a6->sin6_port = htons(static_cast<uint16_t>(port_));
    addr_len = sizeof(sockaddr_in6);
  } else {  // a kernel without IPv6
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) store_fail("rank 0 could not open a socket: " + errno_text(errno));
    auto* a4 = reinterpret_cast<sockaddr_in*>(&addr);
    a4->sin_family = AF_INET;
    a4->sin_addr.s_addr = htonl(INADDR_ANY);
    a4->sin_port = htons(static_cast<uint16_t>(port_));
    addr_len = sizeof(sockaddr_in);
  }
  const int listen_fd = fd;
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{listen_fd};
  const int one = 1;  // a port left in TIME_WAIT by an earlier run is free; a listening one is not
  ::setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(listen_fd, reinterpret_cast<sockaddr*>(&addr), addr_len) != 0) {
    const int e = errno;
    store_fail("rank 0 could not listen at " + where() + ": " + errno_text(e) +
               (e == EADDRINUSE ? " (another job on this port? set MASTER_PORT to a free one)" : ""));
  }
  if (::listen(listen_fd, size_ + 16) != 0)
    store_fail("rank 0 could not listen at " + where() + ": " + errno_text(errno));
  set_socket_options(listen_fd);

  int joined = 1;
  while (joined < size_) {
    if (!wait_ready(listen_fd, POLLIN, until)) {
      std::vector<int> missing;
      for (int r = 1; r < size_; ++r)
        if (fds_[static_cast<size_t>(r)] < 0) missing.push_back(r);
      store_fail("rank 0 waited " + seconds() + " at " + where() + " for " + rank_list(missing) +
                 " to join (not started, or cannot reach this host and port?)");
    }
    const int peer = ::accept(listen_fd, nullptr, nullptr);
    if (peer < 0) continue;  // the client gave up between poll and accept
    set_socket_options(peer);
    Header hello;
    uint8_t* p = reinterpret_cast<uint8_t*>(&hello);
    size_t got = 0;
    bool lost = false;
    while (got < sizeof hello && !lost) {
      if (!wait_ready(peer, POLLIN, until)) break;
      const int64_t n = transfer(peer, p + got, sizeof hello - got, false);
      lost = n < 0;
      got += static_cast<size_t>(std::max<int64_t>(n, 0));
    }
    if (got < sizeof hello || hello.magic != kMagic || hello.kind != Kind::kWelcome) {
      ::close(peer);  // not one of ours, or gone before saying who it is
      continue;
    }
    const int r = hello.rank;
    std::string problem;
    if (hello.size != size_)
      problem = "rank " + std::to_string(r) + " was started with WORLD_SIZE " + std::to_string(hello.size) +
                ", rank 0 with " + std::to_string(size_);
    else if (r < 1 || r >= size_)
      problem = "a process joined as rank " + std::to_string(r) + " of " + std::to_string(size_);
    else if (fds_[static_cast<size_t>(r)] >= 0)
      problem = "two processes joined as rank " + std::to_string(r);
    if (!problem.empty()) {
      ::close(peer);
      store_fail("rank 0 at " + where() + ": " + problem);
    }
    fds_[static_cast<size_t>(r)] = peer;
    ++joined;
  }
  // Everyone is here: tell them, so their constructors return together with this one.
  const Header welcome{kMagic, Kind::kWelcome, 0, size_, 0};
  for (int r = 1; r < size_; ++r)
    send_to(fds_[static_cast<size_t>(r)], r, welcome, nullptr, until, "the rendezvous");
}

void TcpGroup::connect_to_rank0() {
  const auto until = deadline();
  const std::string port = std::to_string(port_);
  std::string last_error = "no address";
  int fd = -1;
  while (fd < 0) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int gai = ::getaddrinfo(host_.c_str(), port.c_str(), &hints, &found);
    if (gai != 0) last_error = std::string("cannot resolve host: ") + ::gai_strerror(gai);
    for (addrinfo* a = gai == 0 ? found : nullptr; a != nullptr && fd < 0; a = a->ai_next) {
      const int s = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (s < 0) continue;
      set_socket_options(s);
      int err = ::connect(s, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
      if (err == EINPROGRESS) {
        if (wait_ready(s, POLLOUT, until)) {
          socklen_t len = sizeof err;
          ::getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
        } else {
          err = ETIMEDOUT;
        }
      }
      if (err == 0) {
        fd = s;
      } else {
        last_error = errno_text(err);
        ::close(s);
      }
    }
    if (found != nullptr) ::freeaddrinfo(found);
    if (fd >= 0) break;
    if (Clock::now() >= until)
      store_fail("rank " + std::to_string(rank_) + " could not reach rank 0 at " + where() + " within " +
                 seconds() + ": " + last_error);
    // Rank 0 may not be listening yet: try again shortly.
    std::this_thread::sleep_for(
        std::min<Clock::duration>(std::chrono::milliseconds(100), until - Clock::now()));
  }
  fds_[0] = fd;
  const Header hello{kMagic, Kind::kWelcome, rank_, size_, 0};
  send_to(fd, 0, hello, nullptr, until, "the rendezvous");
  // Rank 0 waits up to its timeout for slower ranks, counted from before this rank connected;
  // waiting a second longer here lets its verdict (a closed socket) arrive first.
  receive_from_rank0(Kind::kWelcome, nullptr, 0, "the rendezvous", deadline() + std::chrono::seconds(1));
}

void TcpGroup::send_to(int fd, int peer_rank, const Header& h, const void* payload, Clock::time_point until,
                       const char* what) {
  struct Part {
    const uint8_t* data;
    size_t size;
  };
  for (const Part part : {Part{reinterpret_cast<const uint8_t*>(&h), sizeof h},
                          Part{static_cast<const uint8_t*>(payload), static_cast<size_t>(h.bytes)}}) {
    size_t sent = 0;
    while (sent < part.size) {
      const int64_t n = transfer(fd, const_cast<uint8_t*>(part.data) + sent, part.size - sent, true);
      if (n < 0)
        store_fail("rank " + std::to_string(rank_) + ": rank " + std::to_string(peer_rank) +
                   " closed its connection" + (peer_rank == 0 ? " at " + where() : std::string()) +
                   " (did it exit?) during " + what);
      sent += static_cast<size_t>(n);
      if (n == 0 && !wait_ready(fd, POLLOUT, until))
        store_fail("rank " + std::to_string(rank_) + " waited " + seconds() + " in " + what +
                   " to send to rank " + std::to_string(peer_rank));
    }
  }
}

void TcpGroup::receive_from_all(Kind kind, uint8_t* out, uint64_t bytes, bool gather, const char* what) {
  const auto until = deadline();
  struct Incoming {
    int rank;
    Header header;
    size_t got = 0;  // header bytes, then header and payload bytes
  };
  std::vector<Incoming> pending;
  for (int r = 1; r < size_; ++r) pending.push_back({r, Header{}});
  std::vector<uint8_t> scratch(gather ? 0 : bytes);  // payloads not kept
  while (!pending.empty()) {
    std::vector<pollfd> polls;
    for (const Incoming& in : pending) polls.push_back({fds_[static_cast<size_t>(in.rank)], POLLIN, 0});
    const int ready = ::poll(polls.data(), polls.size(), millis_left(until));
    if (ready < 0 && errno != EINTR) store_fail(std::string("poll failed: ") + errno_text(errno));
    if (ready == 0) {
      std::vector<int> missing;
      for (const Incoming& in : pending) missing.push_back(in.rank);
      store_fail("rank 0 waited " + seconds() + " in " + what + " for " + rank_list(missing) +
                 " (stuck, or behind in an earlier step?)");
    }
    for (size_t i = 0; i < pending.size(); ++i) {
      if (polls[i].revents == 0) continue;
      Incoming& in = pending[i];
      const int fd = fds_[static_cast<size_t>(in.rank)];
      const bool in_header = in.got < sizeof(Header);
      uint8_t* dst = in_header ? reinterpret_cast<uint8_t*>(&in.header) + in.got
                     : gather  ? out + static_cast<uint64_t>(in.rank) * bytes + (in.got - sizeof(Header))
                               : scratch.data() + (in.got - sizeof(Header));
      const size_t want = in_header ? sizeof(Header) - in.got : sizeof(Header) + bytes - in.got;
      const int64_t n = transfer(fd, dst, want, false);
      if (n < 0)
        store_fail("rank 0: rank " + std::to_string(in.rank) +
                   " closed its connection (did it exit?) during " + what);
      in.got += static_cast<size_t>(n);
      if (in_header && in.got == sizeof(Header) && (in.header.kind != kind || in.header.bytes != bytes))
        store_fail("rank 0: rank " + std::to_string(in.rank) + " is in " + kind_name(in.header.kind) +
                   " of " + std::to_string(in.header.bytes) + " bytes while rank 0 is in " + what + " of " +
                   std::to_string(bytes) +
                   " bytes (every rank must make the same control exchanges in the same order)");
    }
    std::erase_if(pending, [&](const Incoming& in) { return in.got == sizeof(Header) + bytes; });
  }
}

void TcpGroup::receive_from_rank0(Kind kind, void* out, uint64_t bytes, const char* what,
                                  std::optional<Clock::time_point> until_given) {
  const auto until = until_given.value_or(deadline());
  const int fd = fds_[0];
  Header h;
  auto read = [&](uint8_t* dst, size_t size) {
    size_t got = 0;
    while (got < size) {
      if (!wait_ready(fd, POLLIN, until))
        store_fail("rank " + std::to_string(rank_) + " waited " + seconds() + " in " + what +
                   " for rank 0 at " + where());
      const int64_t n = transfer(fd, dst + got, size - got, false);
      if (n < 0)
        store_fail("rank " + std::to_string(rank_) + ": rank 0 at " + where() +
                   " closed its connection (did it exit?) during " + what);
      got += static_cast<size_t>(n);
    }
  };
  read(reinterpret_cast<uint8_t*>(&h), sizeof h);
  if (h.magic != kMagic || h.kind != kind || h.bytes != bytes)
    store_fail("rank " + std::to_string(rank_) + " is in " + what + " (" + std::to_string(bytes) +
               " bytes back) while rank 0 is in " + kind_name(h.kind) + " (" + std::to_string(h.bytes) +
               " bytes back; every rank must make the same control exchanges in the same order)");
  read(static_cast<uint8_t*>(out), bytes);
}

void TcpGroup::broadcast(void* data, int64_t bytes) {
  const auto n = static_cast<uint64_t>(bytes);
  if (rank_ == 0) {
    const auto until = deadline();
    const Header h{kMagic, Kind::kBroadcast, 0, size_, n};
    for (int r = 1; r < size_; ++r) send_to(fds_[static_cast<size_t>(r)], r, h, data, until, "broadcast");
  } else {
    receive_from_rank0(Kind::kBroadcast, data, n, "broadcast");
  }
}

void TcpGroup::exchange(Kind kind, const void* in, void* out, uint64_t bytes, const char* what) {
  const bool gather = kind == Kind::kAllGather;
  const uint64_t back = gather ? bytes * static_cast<uint64_t>(size_) : 0;
  if (rank_ == 0) {
    if (gather && bytes > 0) std::memcpy(out, in, bytes);
    receive_from_all(kind, static_cast<uint8_t*>(out), bytes, gather, what);
    const auto until = deadline();
    const Header h{kMagic, kind, 0, size_, back};
    for (int r = 1; r < size_; ++r) send_to(fds_[static_cast<size_t>(r)], r, h, out, until, what);
  } else {
    const Header h{kMagic, kind, rank_, size_, bytes};
    send_to(fds_[0], 0, h, in, deadline(), what);
    receive_from_rank0(kind, out, back, what);
  }
}

void TcpGroup::all_gather(const void* in, void* out, int64_t bytes) {
  if (bytes < 0) store_fail("all_gather_bytes of " + std::to_string(bytes) + " bytes");
  exchange(Kind::kAllGather, in, out, static_cast<uint64_t>(bytes), "all_gather_bytes");
}

void TcpGroup::barrier() { exchange(Kind::kBarrier, nullptr, nullptr, 0, "barrier"); }

}  // namespace tg::dist
