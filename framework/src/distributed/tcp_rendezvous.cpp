// The TCP rendezvous (plexus/distributed/nccl_communicator.h): rank 0 hands
// its bytes (NCCL's unique id) to the other ranks over POSIX sockets.
//
// Every message is a header of 28 bytes, the integers in network byte order,
//   magic "PLEXUSRV" (8 bytes) | version | kind | rank | world size | length
// followed by `length` bytes: the payload, or a reason for a refusal.
//   rank r -> rank 0   hello (r, the world size, the bytes r expects)
//   rank 0 -> rank r   payload, once every rank has said hello; or refused (why)
//   rank r -> rank 0   confirm
//   rank 0 -> rank r   all_arrived, once every rank has confirmed; or refused (why)
// The magic stays first and the version second in every later version, so
// that ranks of different builds name the mismatch instead of misreading.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "plexus/distributed/nccl_communicator.h"
#include "plexus/error.h"

namespace plexus::distributed {

namespace {

using Clock = std::chrono::steady_clock;

constexpr char kMagic[8] = {'P', 'L', 'E', 'X', 'U', 'S', 'R', 'V'};
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kHeaderBytes = sizeof kMagic + 5 * sizeof(std::uint32_t);
constexpr std::uint32_t kLongestBody = 64 * 1024;
// How long a rank waits for rank 0's answers beyond the timeout: rank 0's
// own timeout started when it did, and its verdict (which rank is missing)
// says more than this rank's timeout would.
constexpr double kLongestAnswerGraceSeconds = 5;

enum class Kind : std::uint32_t { hello = 1, payload = 2, confirm = 3, refused = 4, all_arrived = 5 };

struct Header {
  std::uint32_t version = kVersion;
  Kind kind = Kind::hello;
  std::uint32_t rank = 0;
  std::uint32_t world_size = 0;
  std::uint32_t length = 0;
};

std::string encode(const Header& header, const std::string& body = "") {
  std::string bytes(kMagic, sizeof kMagic);
  for (const std::uint32_t field :
       {header.version, static_cast<std::uint32_t>(header.kind), header.rank, header.world_size, header.length}) {
    const std::uint32_t in_network_order = htonl(field);
    bytes.append(reinterpret_cast<const char*>(&in_network_order), sizeof in_network_order);
  }
  return bytes + body;
}

// Whether the bytes received so far can still be the start of a message.
bool starts_like_a_message(const std::string& received) {
  return std::memcmp(received.data(), kMagic, std::min(received.size(), sizeof kMagic)) == 0;
}

// The header in `bytes` (at least kHeaderBytes, starting with the magic).
Header decode(const std::string& bytes) {
  std::uint32_t fields[5];
  std::memcpy(fields, bytes.data() + sizeof kMagic, sizeof fields);
  Header header;
  header.version = ntohl(fields[0]);
  header.kind = static_cast<Kind>(ntohl(fields[1]));
  header.rank = ntohl(fields[2]);
  header.world_size = ntohl(fields[3]);
  header.length = ntohl(fields[4]);
  return header;
}

std::string error_text(int code) { return std::error_code(code, std::generic_category()).message(); }

std::string seconds_text(double seconds) {
  std::ostringstream text;
  text << seconds;
  return text.str();
}

// "rank 3", "ranks 3 and 5", "ranks 3, 5, 6, 7, 8, 9, 10, 11 and 40 more".
std::string ranks_text(const std::vector<int>& ranks) {
  constexpr std::size_t kNamed = 8;
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  const std::size_t named = std::min(ranks.size(), kNamed);
  for (std::size_t i = 0; i < named; ++i) {
    if (i > 0) text += i + 1 == ranks.size() ? " and " : ", ";
    text += std::to_string(ranks[i]);
  }
  if (ranks.size() > named) text += " and " + std::to_string(ranks.size() - named) + " more";
  return text;
}

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Socket& operator=(Socket&& other) noexcept {
    if (this != &other) {
      close();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { close(); }
  int fd() const { return fd_; }
  bool open() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Small messages go out at once rather than after Nagle's wait.
void send_without_delay(int fd) {
  const int on = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
}

// poll's timeout until `deadline`, at most a second (so that a deadline is
// noticed even if poll wakes late), at least 0.
int poll_milliseconds(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<std::int64_t>(left, 0, 1000));
}

// Waits until `fd` is ready for `events` (or in error): false when
// `deadline` passes first.
bool wait_for(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd entry{fd, events, 0};
    const int ready = ::poll(&entry, 1, poll_milliseconds(deadline));
    if (ready > 0) return true;
    if (ready < 0 && errno != EINTR) throw IoError("TCP rendezvous: poll failed: " + error_text(errno));
    if (Clock::now() >= deadline) return false;
  }
}

enum class Outcome { done, closed, timed_out, failed };
struct Transfer {
  Outcome outcome = Outcome::done;
  int error = 0;  // errno, for Outcome::failed
};

Transfer send_all(int fd, const std::string& bytes, Clock::time_point deadline) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_for(fd, POLLOUT, deadline)) return {Outcome::timed_out};
    } else if (errno == EPIPE || errno == ECONNRESET) {
      return {Outcome::closed};
    } else if (errno != EINTR) {
      return {Outcome::failed, errno};
    }
  }
  return {};
}

// Appends to `buffer` until it holds `size` bytes.
Transfer receive_until(int fd, std::string& buffer, std::size_t size, Clock::time_point deadline) {
  char chunk[4096];
  while (buffer.size() < size) {
    const ssize_t n = ::recv(fd, chunk, std::min(sizeof chunk, size - buffer.size()), 0);
    if (n > 0) {
      buffer.append(chunk, static_cast<std::size_t>(n));
    } else if (n == 0 || errno == ECONNRESET) {
      return {Outcome::closed};
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_for(fd, POLLIN, deadline)) return {Outcome::timed_out};
    } else if (errno != EINTR) {
      return {Outcome::failed, errno};
    }
  }
  return {};
}

struct Received {
  Transfer transfer;
  bool foreign = false;  // the bytes are not a rendezvous message
  Header header;
  std::string body;
};

Received receive_message(int fd, Clock::time_point deadline) {
  Received received;
  std::string bytes;
  received.transfer = receive_until(fd, bytes, kHeaderBytes, deadline);
  received.foreign = !starts_like_a_message(bytes);
  if (received.transfer.outcome != Outcome::done || received.foreign) return received;
  received.header = decode(bytes);
  if (received.header.version != kVersion) return received;  // the rest may be laid out otherwise
  if (received.header.length > kLongestBody) {
    received.foreign = true;
    return received;
  }
  received.transfer = receive_until(fd, received.body, received.header.length, deadline);
  return received;
}

// Best effort, within a second: the peer may be gone already.
void tell_refused(int fd, const std::string& reason, int world_size) {
  Header header;
  header.kind = Kind::refused;
  header.world_size = static_cast<std::uint32_t>(world_size);
  const std::string body = reason.substr(0, kLongestBody);
  header.length = static_cast<std::uint32_t>(body.size());
  send_all(fd, encode(header, body), Clock::now() + std::chrono::seconds(1));
}

std::string address_text(const sockaddr_in& address) {
  char host[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &address.sin_addr, host, sizeof host);
  return std::string(host) + ":" + std::to_string(ntohs(address.sin_port));
}

void check_setup(const TcpRendezvousSetup& setup, std::size_t bytes) {
  if (setup.world_size < 1 || setup.rank < 0 || setup.rank >= setup.world_size)
    throw ConfigError("TCP rendezvous: rank " + std::to_string(setup.rank) + " of world size " +
                      std::to_string(setup.world_size) + " is not a valid rank");
  if (setup.port < 0 || setup.port > 65535 || (setup.port == 0 && setup.rank != 0))
    throw ConfigError("TCP rendezvous: port " + std::to_string(setup.port) + " is not in [1, 65535]");
  if (!(setup.timeout_seconds > 0) || !std::isfinite(setup.timeout_seconds))
    throw ConfigError("TCP rendezvous: the timeout must be > 0 seconds, got " + seconds_text(setup.timeout_seconds));
  if (bytes > kLongestBody)
    throw ConfigError("TCP rendezvous: " + std::to_string(bytes) + " bytes to share, more than its " +
                      std::to_string(kLongestBody));
}

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// A connection that rank 0 accepted, and, once its hello is read, its rank.
struct Arrival {
  Socket socket;
  std::string address;
  std::string received;  // the hello, so far
  int rank = -1;
};

// Rank 0's side of one rendezvous.
class Host {
 public:
  Host(const TcpRendezvousSetup& setup, int listener, int port, const std::string& payload)
      : setup_(setup),
        listener_(listener),
        port_(port),
        payload_(payload),
        where_(setup.host + ":" + std::to_string(port)),
        arrival_of_rank_(static_cast<std::size_t>(setup.world_size), -1) {}

  void run() {
    wait_for_every_rank();
    send_payload_and_wait_for_confirmations();
    Header header;
    header.kind = Kind::all_arrived;
    header.world_size = static_cast<std::uint32_t>(setup_.world_size);
    // A rank gone by now has its bytes; whatever ended it, it reports itself.
    for (int rank = 1; rank < setup_.world_size; ++rank)
      send_all(arrival_of(rank).socket.fd(), encode(header), after(setup_.timeout_seconds));
  }

 private:
  Arrival& arrival_of(int rank) { return arrivals_[static_cast<std::size_t>(arrival_of_rank_[rank])]; }

  std::string who() const {
    return "rank 0 of " + std::to_string(setup_.world_size) + ", the rendezvous at " + where_ + " (port " +
           std::to_string(port_) + " on every interface)";
  }

  // Tells the ranks that came (and `also`, the culprit) why, and throws.
  [[noreturn]] void fail(const std::string& reason, Arrival* also = nullptr) {
    if (also && also->socket.open()) tell_refused(also->socket.fd(), reason, setup_.world_size);
    for (Arrival& arrival : arrivals_)
      if (arrival.rank > 0 && arrival.socket.open()) tell_refused(arrival.socket.fd(), reason, setup_.world_size);
    throw IoError(who() + ": " + reason);
  }

  void wait_for_every_rank() {
    const auto deadline = after(setup_.timeout_seconds);
    while (arrived_ < setup_.world_size - 1) {
      if (Clock::now() >= deadline) {
        std::vector<int> missing;
        for (int rank = 1; rank < setup_.world_size; ++rank)
          if (arrival_of_rank_[static_cast<std::size_t>(rank)] < 0) missing.push_back(rank);
        fail(ranks_text(missing) + " did not reach the rendezvous within " + seconds_text(setup_.timeout_seconds) +
             " s (" + std::to_string(arrived_ + 1) + " of " + std::to_string(setup_.world_size) +
             " ranks came, rank 0 included); did " +
             (missing.size() == 1 ? "it start, and can its node" : "they start, and can their nodes") + " reach " +
             where_ + "?");
      }
      std::vector<pollfd> polled{{listener_, POLLIN, 0}};
      std::vector<std::size_t> polled_arrival;
      for (std::size_t i = 0; i < arrivals_.size(); ++i)
        if (arrivals_[i].rank < 0 && arrivals_[i].socket.open()) {
          polled.push_back({arrivals_[i].socket.fd(), POLLIN, 0});
          polled_arrival.push_back(i);
        }
      const int ready = ::poll(polled.data(), polled.size(), poll_milliseconds(deadline));
      if (ready < 0 && errno != EINTR) fail("poll failed: " + error_text(errno));
      if (ready <= 0) continue;
      for (std::size_t k = 0; k < polled_arrival.size(); ++k)
        if (polled[k + 1].revents) read_hello(polled_arrival[k]);
      if (polled[0].revents) accept_waiting();
    }
  }

  void accept_waiting() {
    for (;;) {
      sockaddr_in peer{};
      socklen_t length = sizeof peer;
      const int fd = ::accept4(listener_, reinterpret_cast<sockaddr*>(&peer), &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        send_without_delay(fd);
        arrivals_.push_back({Socket(fd), address_text(peer), "", -1});
        continue;
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
      if (errno == EMFILE || errno == ENFILE)
        fail("cannot accept another connection: " + error_text(errno) +
             " (rank 0 holds one connection for each other rank: raise the limit on open files, ulimit -n, above "
             "the world size)");
      fail("accepting a connection failed: " + error_text(errno));
    }
  }

  void read_hello(std::size_t index) {
    Arrival& arrival = arrivals_[index];
    char chunk[kHeaderBytes];
    const ssize_t n = ::recv(arrival.socket.fd(), chunk, kHeaderBytes - arrival.received.size(), 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (n <= 0) {  // gone before saying who it is: not a rank of this job, or one that failed and will say so
      arrival.socket.close();
      return;
    }
    arrival.received.append(chunk, static_cast<std::size_t>(n));
    if (!starts_like_a_message(arrival.received)) {
      spdlog::warn("{}: refused a connection from {}, which is not a Plexus rank (its first bytes are not a "
                   "rendezvous hello)",
                   who(), arrival.address);
      tell_refused(arrival.socket.fd(),
                   "this port is a Plexus rendezvous, and what was sent is not one of its messages", setup_.world_size);
      arrival.socket.close();
      return;
    }
    if (arrival.received.size() < kHeaderBytes) return;
    const Header hello = decode(arrival.received);
    const std::string peer = "rank " + std::to_string(hello.rank) + " (from " + arrival.address + ")";
    if (hello.version != kVersion)
      fail(peer + " speaks version " + std::to_string(hello.version) + " of the rendezvous, rank 0 version " +
               std::to_string(kVersion) + ": start every rank from the same build of Plexus",
           &arrival);
    if (hello.kind != Kind::hello)
      fail(arrival.address + " sent a message of kind " + std::to_string(static_cast<std::uint32_t>(hello.kind)) +
               " before saying which rank it is",
           &arrival);
    if (hello.world_size != static_cast<std::uint32_t>(setup_.world_size))
      fail(peer + " is in a world of " + std::to_string(hello.world_size) + " ranks, rank 0 in a world of " +
               std::to_string(setup_.world_size) +
               ": were the ranks started with different WORLD_SIZE, or does another job use the same "
               "MASTER_ADDR:MASTER_PORT?",
           &arrival);
    if (hello.rank == 0 || hello.rank >= static_cast<std::uint32_t>(setup_.world_size))
      fail(peer + " is not one of the ranks 1 to " + std::to_string(setup_.world_size - 1) +
               " that connect to rank 0: were two processes given RANK=0?",
           &arrival);
    const int rank = static_cast<int>(hello.rank);
    if (arrival_of_rank_[rank] >= 0)
      fail("rank " + std::to_string(rank) + " arrived twice, from " + arrival_of(rank).address + " and from " +
               arrival.address + ": were two processes given RANK=" + std::to_string(rank) + "?",
           &arrival);
    if (hello.length != payload_.size())
      fail(peer + " expects " + std::to_string(hello.length) + " bytes, rank 0 sends " +
               std::to_string(payload_.size()) + ": start every rank from the same build of Plexus",
           &arrival);
    arrival.rank = rank;
    arrival_of_rank_[rank] = static_cast<int>(index);
    ++arrived_;
  }

  void send_payload_and_wait_for_confirmations() {
    const auto deadline = after(setup_.timeout_seconds);
    Header header;
    header.kind = Kind::payload;
    header.world_size = static_cast<std::uint32_t>(setup_.world_size);
    header.length = static_cast<std::uint32_t>(payload_.size());
    const std::string message = encode(header, payload_);
    for (int rank = 1; rank < setup_.world_size; ++rank) {
      Arrival& peer = arrival_of(rank);
      const Transfer sent = send_all(peer.socket.fd(), message, deadline);
      if (sent.outcome != Outcome::done)
        fail("sending the id to rank " + std::to_string(rank) + " (at " + peer.address + ") " + failure_text(sent));
    }
    for (int rank = 1; rank < setup_.world_size; ++rank) {
      Arrival& peer = arrival_of(rank);
      const Received answer = receive_message(peer.socket.fd(), deadline);
      const std::string name = "rank " + std::to_string(rank) + " (at " + peer.address + ")";
      if (answer.transfer.outcome == Outcome::timed_out)
        fail(name + " did not confirm the id within " + seconds_text(setup_.timeout_seconds) + " s");
      if (answer.transfer.outcome != Outcome::done)
        fail("waiting for " + name + " to confirm the id: " + failure_text(answer.transfer));
      if (answer.foreign || answer.header.kind != Kind::confirm)
        fail(name + " answered the id with a message that is not its confirmation");
    }
  }

  static std::string failure_text(const Transfer& transfer) {
    switch (transfer.outcome) {
      case Outcome::done:
        return "succeeded";
      case Outcome::closed:
        return "failed: the rank closed its connection";
      case Outcome::timed_out:
        return "took longer than the timeout";
      case Outcome::failed:
        break;
    }
    return "failed: " + error_text(transfer.error);
  }

  const TcpRendezvousSetup& setup_;
  int listener_;
  int port_;
  const std::string& payload_;
  std::string where_;
  std::vector<Arrival> arrivals_;     // every connection accepted, in order
  std::vector<int> arrival_of_rank_;  // index into arrivals_, -1 until the rank's hello
  int arrived_ = 0;
};

// 0 when connected; otherwise the errno of the failure.
int try_connect(int fd, const sockaddr* address, socklen_t length, Clock::time_point deadline) {
  if (::connect(fd, address, length) != 0) {
    if (errno != EINPROGRESS && errno != EINTR) return errno;
    if (!wait_for(fd, POLLOUT, deadline)) return ETIMEDOUT;
    int code = 0;
    socklen_t size = sizeof code;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &code, &size) != 0) return errno;
    if (code != 0) return code;
  }
  // With nobody listening on a port of the ephemeral range, a connection
  // from 127.0.0.1 may be given that very port as its own and connect to
  // itself (TCP's simultaneous open): that is nobody listening.
  sockaddr_in self{}, peer{};
  socklen_t self_length = sizeof self, peer_length = sizeof peer;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&self), &self_length) == 0 &&
      getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_length) == 0 &&
      self.sin_addr.s_addr == peer.sin_addr.s_addr && self.sin_port == peer.sin_port)
    return ECONNREFUSED;
  return 0;
}

// Connects to rank 0, retrying until `deadline`: rank 0 may start later.
Socket connect_to_rank_zero(const TcpRendezvousSetup& setup, const std::string& me, const std::string& where,
                            Clock::time_point deadline) {
  const std::string port = std::to_string(setup.port);
  std::string last_error = "no attempt was made";
  auto pause = std::chrono::milliseconds(20);
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int status = getaddrinfo(setup.host.c_str(), port.c_str(), &hints, &found);
    if (status == 0) {
      for (const addrinfo* address = found; address; address = address->ai_next) {
        Socket socket(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
        if (!socket.open()) {
          last_error = error_text(errno);
          continue;
        }
        const int code = try_connect(socket.fd(), address->ai_addr, address->ai_addrlen,
                                     std::min(deadline, Clock::now() + std::chrono::seconds(10)));
        if (code == 0) {
          freeaddrinfo(found);
          send_without_delay(socket.fd());
          return socket;
        }
        last_error = error_text(code);
      }
      freeaddrinfo(found);
    } else if (status == EAI_AGAIN) {  // the name service did not answer this time
      last_error = "resolving '" + setup.host + "': " + gai_strerror(status);
    } else {
      throw IoError(me + " could not resolve the rendezvous host '" + setup.host + "' (MASTER_ADDR): " +
                    (status == EAI_SYSTEM ? error_text(errno) : std::string(gai_strerror(status))));
    }
    const auto now = Clock::now();
    if (now >= deadline)
      throw IoError(me + " could not reach the rendezvous at " + where + " within " +
                    seconds_text(setup.timeout_seconds) + " s: " + last_error + " (did rank 0 start, and is " + where +
                    " reachable from this node?)");
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(1000));
  }
}

// Rank 0's next message on `socket`, which must be of `kind`; `waiting_for`
// says what this rank waits for, in the errors.
Received expect(int fd, Kind kind, const TcpRendezvousSetup& setup, const std::string& me, const std::string& where,
                const std::string& waiting_for) {
  const double grace = std::min(kLongestAnswerGraceSeconds, setup.timeout_seconds / 2);
  const Received answer = receive_message(fd, after(setup.timeout_seconds + grace));
  const std::string prefix = me + ", at the rendezvous at " + where + ": ";
  switch (answer.transfer.outcome) {
    case Outcome::done:
      break;
    case Outcome::timed_out:
      throw IoError(prefix + "rank 0 did not send " + waiting_for + " within " + seconds_text(setup.timeout_seconds) +
                    " s");
    case Outcome::closed:
      throw IoError(prefix + "the connection closed while waiting for " + waiting_for +
                    " (did rank 0 fail? or is the port another service's?)");
    case Outcome::failed:
      throw IoError(prefix + "receiving " + waiting_for + " failed: " + error_text(answer.transfer.error));
  }
  if (answer.foreign)
    throw IoError(prefix + "the answer is not a Plexus rendezvous message: is " + where +
                  " another program's port (torchrun's own store, for one)?");
  if (answer.header.version != kVersion)
    throw IoError(prefix + "rank 0 speaks version " + std::to_string(answer.header.version) +
                  " of the rendezvous, this rank version " + std::to_string(kVersion) +
                  ": start every rank from the same build of Plexus");
  if (answer.header.kind == Kind::refused) throw IoError(prefix + "rank 0 refused this rank: " + answer.body);
  if (answer.header.kind != kind)
    throw IoError(prefix + "rank 0 sent a message of kind " +
                  std::to_string(static_cast<std::uint32_t>(answer.header.kind)) + " while this rank waited for " +
                  waiting_for);
  return answer;
}

}  // namespace

TcpRendezvousListener::TcpRendezvousListener(const TcpRendezvousSetup& setup) : setup_(setup) {
  check_setup(setup, 0);
  if (setup.rank != 0)
    throw ConfigError("TCP rendezvous: rank " + std::to_string(setup.rank) + " cannot listen; rank 0 does");
  const std::string me = "rank 0 of " + std::to_string(setup.world_size);
  Socket listener(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!listener.open()) throw IoError(me + " could not open a socket for the rendezvous: " + error_text(errno));
  // The connections of an earlier job on this port, closed but lingering
  // (TIME_WAIT), do not keep it from being bound again; a listener does.
  const int on = 1;
  setsockopt(listener.fd(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(static_cast<std::uint16_t>(setup.port));
  if (::bind(listener.fd(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    const int code = errno;
    throw IoError(
        me + " could not listen for the rendezvous on port " + std::to_string(setup.port) + ": " + error_text(code) +
        (code == EADDRINUSE ? " (another process holds the port: another job, or a service; choose another MASTER_PORT)"
                            : ""));
  }
  if (::listen(listener.fd(), SOMAXCONN) != 0)
    throw IoError(me + " could not listen for the rendezvous on port " + std::to_string(setup.port) + ": " +
                  error_text(errno));
  socklen_t length = sizeof address;
  if (getsockname(listener.fd(), reinterpret_cast<sockaddr*>(&address), &length) != 0)
    throw IoError(me + ": the rendezvous socket has no address: " + error_text(errno));
  port_ = ntohs(address.sin_port);
  socket_ = listener.release();
}

TcpRendezvousListener::~TcpRendezvousListener() {
  if (socket_ >= 0) ::close(socket_);
}

void TcpRendezvousListener::send_to_every_rank(const void* data, std::size_t bytes) {
  check_setup(setup_, bytes);
  const std::string payload(static_cast<const char*>(data), bytes);
  Host(setup_, socket_, port_, payload).run();
}

void receive_from_tcp_rendezvous(const TcpRendezvousSetup& setup, void* data, std::size_t bytes) {
  check_setup(setup, bytes);
  if (setup.rank == 0) throw ConfigError("TCP rendezvous: rank 0 sends the bytes; it does not receive them");
  const std::string me = "rank " + std::to_string(setup.rank) + " of " + std::to_string(setup.world_size);
  const std::string where = setup.host + ":" + std::to_string(setup.port);
  Socket socket = connect_to_rank_zero(setup, me, where, after(setup.timeout_seconds));
  Header hello;
  hello.rank = static_cast<std::uint32_t>(setup.rank);
  hello.world_size = static_cast<std::uint32_t>(setup.world_size);
  hello.length = static_cast<std::uint32_t>(bytes);
  if (send_all(socket.fd(), encode(hello), after(setup.timeout_seconds)).outcome != Outcome::done)
    throw IoError(me + ", at the rendezvous at " + where + ": the connection closed before this rank said who it is");
  const Received payload = expect(socket.fd(), Kind::payload, setup, me, where, "the id");
  if (payload.body.size() != bytes)
    throw IoError(me + ", at the rendezvous at " + where + ": rank 0 sent " + std::to_string(payload.body.size()) +
                  " bytes, this rank expects " + std::to_string(bytes));
  Header confirm;
  confirm.kind = Kind::confirm;
  confirm.rank = hello.rank;
  confirm.world_size = hello.world_size;
  if (send_all(socket.fd(), encode(confirm), after(setup.timeout_seconds)).outcome != Outcome::done)
    throw IoError(me + ", at the rendezvous at " + where + ": the connection closed before this rank confirmed the id");
  expect(socket.fd(), Kind::all_arrived, setup, me, where, "word that every rank has the id");
  std::memcpy(data, payload.body.data(), bytes);
}

void share_through_tcp_rendezvous(const TcpRendezvousSetup& setup, void* data, std::size_t bytes) {
  if (setup.rank == 0) {
    TcpRendezvousListener listener(setup);
    listener.send_to_every_rank(data, bytes);
  } else {
    receive_from_tcp_rendezvous(setup, data, bytes);
  }
}

}  // namespace plexus::distributed
