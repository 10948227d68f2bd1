#!/usr/bin/env python3
"""dbus-fast baseline receiver for scripts/bench-dbus.

    dbusfast_receiver.py --address ADDR --count N

Connects to the bus at ADDR, installs the same match rule as the C and Swift
receivers, prints READY, then reads N BlueZ-shaped PropertiesChanged signals.
dbus-fast unmarshals every body completely before the handler runs; the
handler touches every value and accumulates the checksum defined in
scripts/bench/README.md (sum of RSSI + sum of manufacturer-data bytes).
Finally prints one JSON line and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time

MATCH_RULE = (
    "type='signal',interface='org.freedesktop.DBus.Properties',"
    "member='PropertiesChanged',path_namespace='/org/bluez'"
)


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def compiled_modules() -> dict[str, bool]:
    """Which of dbus-fast's hot modules are the Cython-compiled extensions."""
    import importlib

    names = [
        "dbus_fast._private.unmarshaller",
        "dbus_fast.message",
        "dbus_fast.message_bus",
        "dbus_fast.aio.message_reader",
        "dbus_fast.signature",
    ]
    out = {}
    for name in names:
        mod = importlib.import_module(name)
        out[name] = str(getattr(mod, "__file__", "")).endswith(".so")
    return out


async def run(address: str, count: int) -> int:
    from dbus_fast import Message, MessageType
    from dbus_fast.aio import MessageBus

    got = bad = total = total_sink = 0
    first = last = 0.0
    done = asyncio.get_running_loop().create_future()
    signal = MessageType.SIGNAL

    def handler(msg: Message) -> None:
        nonlocal got, bad, total, total_sink, first, last
        if (
            msg.message_type is not signal
            or msg.member != "PropertiesChanged"
            or msg.interface != "org.freedesktop.DBus.Properties"
        ):
            return None
        if got == 0:
            first = time.monotonic()
        try:
            iface, changed, invalidated = msg.body
            if iface != "org.bluez.Device1":
                raise ValueError(f"interface {iface!r}")
            checksum = 0
            sink = 0
            for key, variant in changed.items():
                value = variant.value
                if key == "RSSI" and variant.signature == "n":
                    checksum += value
                elif key == "ManufacturerData":
                    for company, data in value.items():
                        sink ^= company
                        payload = data.value
                        if isinstance(payload, (bytes, bytearray)):
                            checksum += sum(payload)
                        else:
                            sink ^= hash(repr(payload)) & 0xFF
                else:
                    sink ^= hash(repr(value)) & 0xFF
            for name in invalidated:
                sink ^= ord(name[0]) if name else 0
            total += checksum
            total_sink ^= sink
        except (ValueError, TypeError, AttributeError, KeyError):
            bad += 1
        got += 1
        last = time.monotonic()
        if got >= count and not done.done():
            done.set_result(None)
        return None

    bus = await MessageBus(bus_address=address).connect()
    bus.add_message_handler(handler)
    reply = await bus.call(
        Message(
            destination="org.freedesktop.DBus",
            path="/org/freedesktop/DBus",
            interface="org.freedesktop.DBus",
            member="AddMatch",
            signature="s",
            body=[MATCH_RULE],
        )
    )
    if reply is None or reply.message_type is not MessageType.METHOD_RETURN:
        print(f"dbusfast_receiver: AddMatch failed: {reply and reply.body}", file=sys.stderr)
        return 2

    c0 = cpu_s()
    print("READY", flush=True)
    await done
    cpu = cpu_s() - c0
    bus.disconnect()

    import importlib.metadata

    mods = compiled_modules()
    print(
        json.dumps(
            {
                "impl": "dbus-fast",
                "messages": got,
                "wall_s": round(last - first, 6),
                "cpu_s": round(cpu, 6),
                "checksum": total,
                "malformed": bad,
                "sink": total_sink,
                "compiled": all(mods.values()),
                "compiled_modules": mods,
                "version": importlib.metadata.version("dbus-fast"),
                "python": sys.version.split()[0],
            },
            separators=(",", ":"),
        ),
        flush=True,
    )
    return 0 if bad == 0 else 4


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--address", required=True)
    p.add_argument("--count", required=True, type=int)
    a = p.parse_args()
    if a.count < 1:
        p.error("--count must be >= 1")
    return asyncio.run(run(a.address, a.count))


if __name__ == "__main__":
    sys.exit(main())
