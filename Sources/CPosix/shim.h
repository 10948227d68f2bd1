#ifndef BLECOMPANION_CSYSTEM_SHIM_H
#define BLECOMPANION_CSYSTEM_SHIM_H
// Not API: glibc calls declared only under _GNU_SOURCE, which Swift's Glibc
// module is not built with. Both exist in glibc since 2.34 (Debian 12,
// Ubuntu 22.04).
#include <spawn.h>
#include <sys/socket.h>

extern int posix_spawn_file_actions_addclosefrom_np(posix_spawn_file_actions_t *, int);
extern int accept4(int, struct sockaddr *, socklen_t *, int);

/// Adds a spawn action closing every descriptor from `from` up, so a child
/// keeps none of the parent's pipes and sockets open.
static inline int csystem_spawn_close_from(posix_spawn_file_actions_t *actions, int from) {
    return posix_spawn_file_actions_addclosefrom_np(actions, from);
}

/// accept(2) with flags (SOCK_CLOEXEC, SOCK_NONBLOCK) applied atomically.
static inline int csystem_accept4(int fd, struct sockaddr *address, socklen_t *length, int flags) {
    return accept4(fd, address, length, flags);
}
/// MSG_NOSIGNAL (send(2) returns EPIPE instead of raising SIGPIPE). glibc
/// defines it as an enum constant plus a macro; which Swift file sees it
/// through the Glibc module differs between debug and whole-module release
/// builds, so it is spelled once here.
static inline int csystem_msg_nosignal(void) {
    return MSG_NOSIGNAL;
}
#endif
