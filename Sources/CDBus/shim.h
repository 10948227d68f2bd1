#ifndef BLECOMPANION_CDBUS_SHIM_H
#define BLECOMPANION_CDBUS_SHIM_H
// Not API: the libdbus-1 C surface plus the Linux event primitives the
// D-Bus module's I/O thread uses. Imported only by the DBus module.
#include <dbus/dbus.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>

/// Names the calling thread (shown by top -H, perf and gdb). prctl is
/// variadic, which Swift cannot call directly.
static inline void cdbus_set_thread_name(const char *name) {
    prctl(PR_SET_NAME, (unsigned long)name, 0UL, 0UL, 0UL);
}
#endif
