#ifndef BLECOMPANION_CMOSQUITTO_SHIM_H
#define BLECOMPANION_CMOSQUITTO_SHIM_H
// Not API: the libmosquitto client C surface (plus the socket call the MQTT
// module's test hook uses). Imported only by the MQTT module.
#include <mosquitto.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#endif
