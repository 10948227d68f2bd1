#!/usr/bin/env python3
"""The differential probe: the same client operations against bluetoothd or
the simulator, and what a client sees on the bus, normalised.

    probe.py [--bus ADDRESS] --out FILE

Works on demo-home's devices (the heart-rate strap E4:5F:01:AA:10:01, the
BTHome sensor A4:C1:38:8D:18:B2). Each step prints one JSON object: the step
name and what was observed — the order of replies and signals (RSSI values
and timings left out), error names, which objects and properties exist with
their D-Bus signatures. The real run (in the VM) is kept as
fixtures/real-bluez/probe-bluez-5.66.json; compare.py sets the simulator's
run against it.
"""

import argparse
import json
import re
import sys

import dbus
import dbus.mainloop.glib
from gi.repository import GLib

BLUEZ = "org.bluez"
ADAPTER = "/org/bluez/hci0"
STRAP = ADAPTER + "/dev_E4_5F_01_AA_10_01"
BTHOME = ADAPTER + "/dev_A4_C1_38_8D_18_B2"
PROPS = "org.freedesktop.DBus.Properties"
OM = "org.freedesktop.DBus.ObjectManager"

# Properties whose values depend on timing or the radio: only their presence counts.
VOLATILE = {"RSSI", "TxPower", "ManufacturerData", "ServiceData", "Value", "Percentage", "MTU", "Name", "Alias",
            "Address", "Class", "Modalias", "Discovering", "Connected", "ServicesResolved", "Paired", "Bonded",
            "Trusted", "UUIDs", "Appearance", "Icon", "Roles", "Handle", "Notifying", "Flags", "Includes",
            "Service", "Characteristic", "Device", "Adapter", "Primary", "UUID", "AddressType", "Blocked",
            "LegacyPairing", "WakeAllowed", "Powered", "Discoverable", "DiscoverableTimeout", "Pairable",
            "PairableTimeout", "PowerState", "Connectable", "Manufacturer", "Version", "NotifyAcquired",
            "WriteAcquired", "AdvertisingFlags", "AdvertisingData", "ExperimentalFeatures", "Sets", "Preferred",
            "ActiveInstances", "SupportedInstances", "SupportedIncludes", "SupportedSecondaryChannels",
            "SupportedMonitorTypes", "SupportedFeatures", "SupportedCapabilities"}

# Devices a probe step may report: the strap and the BTHome sensor (others
# advertise too; their order against ours is not what is compared).
WATCHED = (STRAP, BTHOME)


class Probe:
    def __init__(self, bus):
        self.bus = bus
        self.loop = GLib.MainLoop()
        self.events = []
        self.recording = False
        bus.add_signal_receiver(self.on_properties, dbus_interface=PROPS, signal_name="PropertiesChanged",
                                bus_name=BLUEZ, path_keyword="path")
        bus.add_signal_receiver(self.on_added, dbus_interface=OM, signal_name="InterfacesAdded", bus_name=BLUEZ)
        bus.add_signal_receiver(self.on_removed, dbus_interface=OM, signal_name="InterfacesRemoved", bus_name=BLUEZ)
        self.results = []

    # What is recorded ---------------------------------------------------------
    def relevant(self, path):
        return path == ADAPTER or any(path == w or path.startswith(w + "/") for w in WATCHED)

    @staticmethod
    def short(path):
        return str(path).replace(STRAP, "strap").replace(BTHOME, "bthome").replace(ADAPTER, "hci0")

    def record(self, text):
        if self.recording and (not self.events or self.events[-1] != text):
            self.events.append(text)

    def on_properties(self, interface, changed, invalidated, path=None):
        if not self.relevant(path):
            return
        for key in sorted(changed):
            if key in ("RSSI", "TxPower", "ManufacturerData", "ServiceData"):
                continue  # advertisement noise: compared in their own steps
            if key == "Value" and interface.endswith("GattCharacteristic1"):
                continue  # notifications: how many fall in a step is timing
            value = changed[key]
            shown = bool(value) if isinstance(value, dbus.Boolean) else ("…" if key in VOLATILE else str(value))
            self.record(f"{self.kind(path)} {interface.rsplit('.', 1)[-1]}.{key}={shown}")

    def on_added(self, path, interfaces):
        if self.relevant(path):
            kinds = ",".join(sorted(i.rsplit(".", 1)[-1] for i in interfaces if i.startswith("org.bluez")))
            self.record(f"added {self.kind(path)} [{kinds}]")

    def on_removed(self, path, interfaces):
        if self.relevant(path):
            kinds = ",".join(sorted(i.rsplit(".", 1)[-1] for i in interfaces if i.startswith("org.bluez")))
            self.record(f"removed {self.kind(path)} [{kinds}]")

    def kind(self, path):
        s = self.short(path)
        # GATT objects by kind, not by handle (handles differ between stacks).
        parts = s.split("/")
        if len(parts) > 1:
            return parts[0] + "/" + "/".join(re.sub(r"[0-9a-f]{4}$", "", p) for p in parts[1:])
        return s

    # Driving ------------------------------------------------------------------
    def wait(self, seconds):
        GLib.timeout_add(int(seconds * 1000), self.loop.quit)
        self.loop.run()

    def call(self, path, interface, method, *args, label=None):
        """Calls asynchronously so the reply takes its place among the signals."""
        done = {}

        def ok(*result):
            done["reply"] = "ok"
            self.record(f"reply {label or method}: ok")

        def failed(error):
            name = error.get_dbus_name()
            done["reply"] = name
            self.record(f"reply {label or method}: {name} \"{error.get_dbus_message()}\"")

        obj = self.bus.get_object(BLUEZ, path, introspect=False)
        getattr(obj, method)(*args, dbus_interface=interface, reply_handler=ok, error_handler=failed, timeout=60)
        return done

    def call_and_wait(self, *args, **kwargs):
        done = self.call(*args, **kwargs)
        context = self.loop.get_context()
        while "reply" not in done:
            context.iteration(True)
        return done

    def step(self, name, action, settle, ordered=True):
        """ordered=False: the real daemon was seen to emit this step's reply
        and signal in either order (both go out in one main-loop turn), so
        only which events came counts."""
        self.events = []
        self.recording = True
        action()
        self.wait(settle)
        self.recording = False
        events = settled(self.events)
        self.results.append({"step": name, "observed": events if ordered else sorted(events)})

    def managed(self):
        om = dbus.Interface(self.bus.get_object(BLUEZ, "/", introspect=False), OM)
        return om.GetManagedObjects()

    def shape(self, paths_prefix):
        """Which interfaces and property names (with signatures) each object has."""
        out = []
        for path, interfaces in sorted(self.managed().items()):
            if not (path == paths_prefix or str(path).startswith(paths_prefix + "/")):
                continue
            for interface, props in sorted(interfaces.items()):
                if not interface.startswith("org.bluez"):
                    continue
                sig = ",".join(f"{k}:{signature(v)}" for k, v in sorted(props.items()))
                out.append(f"{self.kind(path)} {interface.rsplit('.', 1)[-1]} {sig}")
        return sorted(set(out))

    def gatt(self, uuid):
        for path, interfaces in self.managed().items():
            c = interfaces.get("org.bluez.GattCharacteristic1")
            if c and str(path).startswith(STRAP) and str(c["UUID"]).startswith("0000" + uuid):
                return str(path)
        return None

    def run(self):
        adapter = ADAPTER
        a = "org.bluez.Adapter1"
        d = "org.bluez.Device1"
        g = "org.bluez.GattCharacteristic1"
        # 1. Discovery filter on fcd2 (service data only on the BTHome sensor).
        # (The filter is set and answered before StartDiscovery goes out, as
        # every client does it.)
        self.step("filter-uuids-service-data", lambda: (
            self.call_and_wait(adapter, a, "SetDiscoveryFilter",
                               dbus.Dictionary({"UUIDs": dbus.Array(["fcd2"], signature="s")}, signature="sv")),
            self.call(adapter, a, "StartDiscovery")), 6)
        found = BTHOME in {str(p) for p in self.managed()}
        self.results.append({"step": "filter-uuids-service-data-found", "observed": [f"bthome listed: {found}"]})
        self.step("stop-filtered-discovery", lambda: (
            self.call(adapter, a, "StopDiscovery"),
            self.call(adapter, a, "SetDiscoveryFilter", dbus.Dictionary({}, signature="sv"), label="ClearFilter")), 1,
            ordered=False)
        # 2. Discovery without a filter: the reply against Discovering.
        self.step("start-discovery", lambda: self.call(adapter, a, "StartDiscovery"), 5)
        self.results.append({"step": "adapter-properties", "observed": [s for s in self.shape(ADAPTER) if s.startswith("hci0 ")]})
        self.results.append({"step": "device-properties", "observed": [s for s in self.shape(STRAP) if s.startswith("strap ")]})
        # 3. Disconnect of a device that is not connected.
        self.step("disconnect-unconnected", lambda: self.call(STRAP, d, "Disconnect"), 1)
        # 4. Connect: reply against Connected, GATT objects, ServicesResolved, Battery1.
        self.step("connect", lambda: self.call(STRAP, d, "Connect"), 6)
        self.results.append({"step": "gatt-properties", "observed": [s for s in self.shape(STRAP) if not s.startswith("strap ")]})
        hrm, location, control = self.gatt("2a37"), self.gatt("2a38"), self.gatt("2a39")
        if hrm and location and control:
            # The second 10 ms after the first (while the first's CCCD write is
            # out): sent back to back, which of the two a daemon takes first
            # is up to its scheduling, not to BlueZ's rules.
            self.step("start-notify-twice", lambda: (self.call(hrm, g, "StartNotify", label="StartNotify#1"),
                                                     self.wait(0.01),
                                                     self.call(hrm, g, "StartNotify", label="StartNotify#2")), 2)
            self.step("stop-notify", lambda: self.call(hrm, g, "StopNotify"), 1)
            self.step("read-past-end", lambda: self.call(location, g, "ReadValue",
                                                         dbus.Dictionary({"offset": dbus.UInt16(100)}, signature="sv")), 1)
            self.step("read-write-only", lambda: self.call(control, g, "ReadValue", dbus.Dictionary({}, signature="sv")), 1)
            self.step("write-command-to-read-only", lambda: self.call(
                location, g, "WriteValue", dbus.Array([dbus.Byte(1)], signature="y"),
                dbus.Dictionary({"type": "command"}, signature="sv")), 1)
            self.step("write-untyped-to-read-only", lambda: self.call(
                location, g, "WriteValue", dbus.Array([dbus.Byte(1)], signature="y"), dbus.Dictionary({}, signature="sv")), 1)
            self.step("write-request-to-read-only", lambda: self.call(
                location, g, "WriteValue", dbus.Array([dbus.Byte(1)], signature="y"),
                dbus.Dictionary({"type": "request"}, signature="sv")), 1)
        else:
            self.results.append({"step": "gatt-missing", "observed": [f"2a37 {hrm} 2a38 {location} 2a39 {control}"]})
        # 5. Disconnect: the order, and what stays.
        self.step("disconnect", lambda: self.call(STRAP, d, "Disconnect"), 5)
        left = sorted({self.kind(p) for p in self.managed() if str(p).startswith(STRAP + "/")})
        self.results.append({"step": "after-disconnect-objects", "observed": left})
        self.step("stop-discovery", lambda: self.call(adapter, a, "StopDiscovery"), 1, ordered=False)
        return self.results


def settled(events):
    """Objects added or removed next to each other are sorted: which device
    advertises first, or in which order GATT objects are walked, is not what
    is compared — their place among replies and property changes is."""
    out, run = [], []
    for e in events + [None]:
        if e is not None and (e.startswith("added ") or e.startswith("removed ")):
            run.append(e)
            continue
        out += sorted(run)
        run = []
        if e is not None:
            out.append(e)
    return out


def signature(value):
    if isinstance(value, dbus.Boolean):
        return "b"
    for t, s in ((dbus.Byte, "y"), (dbus.Int16, "n"), (dbus.UInt16, "q"), (dbus.Int32, "i"), (dbus.UInt32, "u"),
                 (dbus.Int64, "x"), (dbus.UInt64, "t"), (dbus.Double, "d"), (dbus.ObjectPath, "o"),
                 (dbus.String, "s")):
        if isinstance(value, t):
            return s
    if isinstance(value, dbus.Array):
        return "a" + (value.signature or "?")
    if isinstance(value, dbus.Dictionary):
        return "a{" + (value.signature or "?") + "}"
    return type(value).__name__


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bus", help="bus address (default: the system bus)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    bus = dbus.bus.BusConnection(args.bus) if args.bus else dbus.SystemBus()
    results = Probe(bus).run()
    with open(args.out, "w") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
