#ifndef BLECOMPANION_CBLUETOOTH_SHIM_H
#define BLECOMPANION_CBLUETOOTH_SHIM_H
// Not API: libbluetooth (BlueZ userspace HCI helpers), imported only by BluetoothHCI.
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <bluetooth/bluetooth.h>
#include <bluetooth/hci.h>
#include <bluetooth/hci_lib.h>
#endif
