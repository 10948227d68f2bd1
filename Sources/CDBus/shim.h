#ifndef BLECOMPANION_CDBUS_SHIM_H
#define BLECOMPANION_CDBUS_SHIM_H
// Not API: the libdbus-1 C surface plus the Linux event and socket
// primitives the D-Bus module's I/O thread uses. Imported only by the DBus
// module.
#include <dbus/dbus.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

/// The most descriptors Linux passes in one SCM_RIGHTS message (SCM_MAX_FD).
#define CDBUS_MAX_FDS_PER_READ 253

/// One recvmsg() on a stream socket, collecting any SCM_RIGHTS descriptors
/// (close-on-exec) into fds[0..<*nfds]. Returns what recvmsg returns (0 at
/// end of stream, -1 with errno set). *lost is set when the kernel or this
/// function had to drop descriptors (the caller can no longer tell which
/// message they belonged to). The CMSG_* macros cannot be used from Swift.
static inline long cdbus_recv_with_fds(int fd, void *buf, unsigned long len,
                                       int *fds, int *nfds, int *lost) {
    union {
        struct cmsghdr align;
        char space[CMSG_SPACE(sizeof(int) * CDBUS_MAX_FDS_PER_READ)];
    } control;
    struct iovec iov;
    struct msghdr msg;
    struct cmsghdr *c;
    long n;
    iov.iov_base = buf;
    iov.iov_len = len;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.space;
    msg.msg_controllen = sizeof control.space;
    *nfds = 0;
    *lost = 0;
    n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0) return n;
    if (msg.msg_flags & MSG_CTRUNC) *lost = 1;
    for (c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            size_t i;
            for (i = 0; i < count; i++) {
                int received;
                memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                if (*nfds < CDBUS_MAX_FDS_PER_READ) {
                    fds[(*nfds)++] = received;
                } else {
                    close(received);
                    *lost = 1;
                }
            }
        }
    }
    return n;
}
#endif
