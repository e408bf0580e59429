// The fork server's wire format (docs/architecture.md#the-fork-server): meshtest asks a trainer
// that loaded its libraries once (`meshtrain forkserver --fd N`) to start each rank as a fork of
// itself. One request or reply is one message on a SOCK_SEQPACKET socket: JSON text, and with a
// request the rank's stdin, stdout and stderr as SCM_RIGHTS.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace contract {

// What an exec would have been given, and where the new process goes.
struct ForkRequest {
  std::vector<std::string> argv;
  std::vector<std::string> env;  // the whole environment, "KEY=VALUE" each
  std::string work_dir;
  pid_t process_group = 0;  // join this process group; 0: lead a new one
  pid_t reaper = 0;         // the process that adopts the rank (meshtest, a subreaper)
};

// Throws std::runtime_error naming the system error, or the message when it is too large.
void send_fork_request(int socket, const ForkRequest& request, const int fds[3]);
// False when the peer has closed the socket. The caller owns the three descriptors it gets.
// Throws std::runtime_error on a malformed message.
bool receive_fork_request(int socket, ForkRequest& request, int fds[3]);

// The server's answer: the new process's pid, or why there is none. A server that has just
// started sends one with pid 0 and an empty error when it can fork, or the error why not.
struct ForkReply {
  pid_t pid = 0;
  std::string error;
};
void send_fork_reply(int socket, const ForkReply& reply);
// Throws std::runtime_error when the socket fails or closes before a reply.
ForkReply receive_fork_reply(int socket);

}  // namespace contract
