#pragma once
// This host's address as another host sees it.
#include <cstdint>
#include <string>
#include <utility>

namespace actorpipe {

/// The local address this host uses to reach `host`:`port` (the source
/// address the kernel picks for a UDP socket connected there; no packet is
/// sent): 127.0.0.1 toward loopback, the veth's address toward a peer
/// namespace. Throws std::runtime_error naming the host when it does not
/// resolve or has no route.
std::string local_address_toward(const std::string& host, int port);

/// A TCP socket bound to `addr` on a port the kernel picks, listening when
/// asked: (fd, port), the fd -1 when no address of it could bind (errno
/// says why). Throws std::runtime_error, `what` first, when `addr` does
/// not resolve.
std::pair<int, uint16_t> bind_any_port(const std::string& addr, bool listening, const std::string& what);

/// A TCP port on `addr` that was free a moment ago (bound, closed): another
/// process may take it before the caller binds it, the race torchrun has.
/// It is drawn below the kernel's ephemeral range where it can be (no
/// bind to port 0 or connect elsewhere gets it then), else the kernel's
/// pick. Throws std::runtime_error when `addr` does not resolve or no
/// address of it could bind.
uint16_t free_port(const std::string& addr);

/// Shuts down every TCP socket of this process connected to `host`:`port`
/// (each of its addresses), so that a read or write blocked on it ends
/// with an error at once: a peer that stopped answering, or one cut off,
/// would hold it until a timeout. Returns how many it shut down (0 when
/// `host` does not resolve).
int cut_connections_to(const std::string& host, uint16_t port);

}  // namespace actorpipe
