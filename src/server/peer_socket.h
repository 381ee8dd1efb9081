#pragma once
// Whether the client of an HTTP request hung up, so its generation can be cancelled. cpp-httplib
// (0.11) does not hand handlers the socket, so it is found by its two ports among our descriptors.
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

}  // namespace fasa
