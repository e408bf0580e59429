#pragma once

namespace meshtest {

// A TCP port for a rank group's store (MASTER_PORT) that nothing else takes before
// rank 0 binds it.
//
// A port from bind(0) is ephemeral: in the seconds a trainer takes to start, any
// connect() or Gloo listener on the machine may be handed that same port, and the
// job's ranks then talk to another job's socket (both fail, each with a message that
// points nowhere near the cause). So the port comes from outside the kernel's
// ephemeral range (which bind(0) and connect() never hand out), is free right now,
// and is reserved among meshtest processes and tests by holding an abstract unix
// socket named after it until this process has handed out many more ports.
int reserve_store_port();

}  // namespace meshtest
