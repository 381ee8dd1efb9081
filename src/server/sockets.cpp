#include "server/sockets.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>
#include <functional>

namespace fasa {

namespace {

// Port and numeric address of a socket name; false if it is not an IP socket.
bool ip_endpoint(const sockaddr_storage& a, int& port, std::string& addr) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    auto* s = reinterpret_cast<const sockaddr_in*>(&a);
    port = ntohs(s->sin_port);
    inet_ntop(AF_INET, &s->sin_addr, buf, sizeof buf);
  } else if (a.ss_family == AF_INET6) {
    auto* s = reinterpret_cast<const sockaddr_in6*>(&a);
    port = ntohs(s->sin6_port);
    inet_ntop(AF_INET6, &s->sin6_addr, buf, sizeof buf);
  } else {
    return false;
  }
  addr = buf;
  return true;
}

// The first descriptor of ours that `match` accepts, or -1.
int find_fd(const std::function<bool(int fd)>& match) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    if (fd > 2 && fd != dirfd(dir) && match(fd)) {
      found = fd;
      break;
    }
  }
  closedir(dir);
  return found;
}

bool local_endpoint(int fd, int& port, std::string& addr) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  return getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0 && ip_endpoint(a, port, addr);
}

bool peer_endpoint(int fd, int& port, std::string& addr) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  return getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0 && ip_endpoint(a, port, addr);
}

}  // namespace

PeerSocket::PeerSocket(int local_port, const std::string& remote_addr, int remote_port) {
  fd_ = find_fd([&](int fd) {
    int lport, pport;
    std::string laddr, paddr;
    return local_endpoint(fd, lport, laddr) && lport == local_port && peer_endpoint(fd, pport, paddr) &&
           pport == remote_port && paddr == remote_addr;
  });
}

void exclusive_listen_options(int fd) {
  int yes = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
}

bool raise_listen_backlog(int port, int backlog) {
  const int fd = find_fd([&](int fd) {
    int listening = 0, lport;
    socklen_t len = sizeof listening;
    std::string laddr;
    return getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening &&
           local_endpoint(fd, lport, laddr) && lport == port;
  });
  return fd >= 0 && listen(fd, backlog) == 0;  // listen() again on a listening socket sets its backlog
}

bool PeerSocket::closed() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  char c;  // readable: either a pipelined request (data) or an orderly shutdown (0 bytes)
  return recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

}  // namespace fasa
