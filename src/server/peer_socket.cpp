#include "server/peer_socket.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>

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

}  // namespace

PeerSocket::PeerSocket(int local_port, const std::string& remote_addr, int remote_port) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return;
  while (dirent* e = readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2 || fd == dirfd(dir)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t ll = sizeof local, pl = sizeof peer;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0 ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0)
      continue;
    int lport, pport;
    std::string laddr, paddr;
    if (ip_endpoint(local, lport, laddr) && ip_endpoint(peer, pport, paddr) && lport == local_port &&
        pport == remote_port && paddr == remote_addr) {
      fd_ = fd;
      break;
    }
  }
  closedir(dir);
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
