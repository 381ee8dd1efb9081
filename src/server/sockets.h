#pragma once
// The server's sockets that cpp-httplib (0.11) keeps to itself, found by their ports among the
// process's descriptors: a request's connection (to notice a client that hung up, so its generation
// is cancelled) and the listening socket (whose accept backlog it fixes at 5).
#include <string>

namespace fasa {

class PeerSocket {
 public:
  PeerSocket() = default;
  // The connected socket whose local port is `local_port` and whose peer is remote_addr:remote_port.
  PeerSocket(int local_port, const std::string& remote_addr, int remote_port);
  bool found() const { return fd_ >= 0; }
  // True once the peer closed its end (or the socket failed). Never blocks.
  bool closed() const;

 private:
  int fd_ = -1;
};

// Socket options for the listening socket: SO_REUSEADDR (restart at once after a stop) but not
// SO_REUSEPORT, which cpp-httplib sets by default and which lets a second server bind the same port
// and silently take half of its connections.
void exclusive_listen_options(int fd);

// Raises the accept backlog of the socket listening on `port`: with cpp-httplib's 5, a burst of new
// connections overflows the queue and clients stall on retransmits, then fail. False if not found.
bool raise_listen_backlog(int port, int backlog);

}  // namespace fasa
