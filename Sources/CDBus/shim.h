#ifndef BLECOMPANION_CDBUS_SHIM_H
#define BLECOMPANION_CDBUS_SHIM_H
// Not API: the libdbus-1 C surface plus the Linux event primitives the
// D-Bus module's I/O thread uses. Imported only by the DBus module.
#include <dbus/dbus.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#endif
