#pragma once
// This host's address as another host sees it.
#include <string>

namespace actorpipe {

/// The local address this host uses to reach `host`:`port` (the source
/// address the kernel picks for a UDP socket connected there; no packet is
/// sent): 127.0.0.1 toward loopback, the veth's address toward a peer
/// namespace. Throws std::runtime_error naming the host when it does not
/// resolve or has no route.
std::string local_address_toward(const std::string& host, int port);

}  // namespace actorpipe
