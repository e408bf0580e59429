// `meshtrain forkserver --fd N`: starts ranks as forks of one process that has loaded LibTorch,
// so that each rank skips LibTorch's start and its static destructors (0.7 CPU-seconds a rank
// on Debian's build, 0.08 forked: tools/bench/fork_bench.cpp). meshtest starts one per environment and asks
// it for each rank (contract/fork_server.h, docs/architecture.md#the-fork-server).
//
// A rank it starts gets what an exec would give it: the argv, the whole environment and the
// working directory of the request, the three descriptors sent with it and no other, default
// signal dispositions and an empty signal mask, a process group of the request's, and meshtest
// as its parent (it forks twice; meshtest, a subreaper, adopts the grandchild) with death
// signal SIGKILL. Then it runs `program_main` (meshtrain_main), flushes stdio and _exits with
// its code: no static destructors, which would copy page by page the tables it shares with the
// server (0.35 CPU-seconds a rank). An uncaught exception terminates it, as it would the binary.
#pragma once

namespace meshtrain {

// Serves requests on `socket` until the peer closes it. Refuses to start (replies the reason,
// returns 1) when this process has more than one thread: a fork copies only the caller.
int serve_forks(int socket, int (*program_main)(int argc, char** argv));

}  // namespace meshtrain
