#pragma once
// Every c10d TCPStore this project opens, server or client, comes from
// here.
//
// libtorch 1.x's TCPStore opens a second connection for watchKey and a
// thread that listens on it (TCPStoreWorkerDaemon). This project never
// watches a key, and that thread harms a process whose store's server
// goes away:
//  - a server that closes (FIN): the thread's poll fires for good and it
//    spins a core until the store is destroyed;
//  - a server killed while the connection still waits in its accept
//    queue, or one that resets it (RST): the thread's read throws, and
//    nothing catches it: std::terminate, the process ends.
// A rank that outlives its coordinator (`launch --coordinator etcd://`:
// it waits for the standby that takes over) met both. Here the listening
// connection is closed as soon as the store is made, and the thread's
// socket is replaced by one that never fires; watchKey throws. Other
// libtorch versions' stores are made as they are.
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <string>

namespace actorpipe {

/// A c10d::TCPStore made with `opts` at `host`, its watch-key listener
/// quieted (libtorch 1.x): it neither spins nor ends the process when the
/// server goes. Throws what c10d's constructor throws.
c10::intrusive_ptr<c10d::TCPStore> make_tcp_store(const std::string& host, const c10d::TCPStoreOptions& opts);

/// Whether `store`'s listener was quieted (for tests).
bool listener_quieted(const c10d::TCPStore& store);

}  // namespace actorpipe
