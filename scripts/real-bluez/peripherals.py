#!/usr/bin/env python3
"""Virtual peripherals for the real-BlueZ tier, made from simulator scenarios.

Runs inside the test VM. Opens /dev/vhci as the controller bluetoothd drives
(the scenario's adapter address), and puts one Bumble controller and device per
scenario device on the same local link: advertising data built from the
scenario's fields and played along its advertising timeline, a GATT server
from its `gatt` (values, texts, descriptors, write rules, notification
timelines played while a client is subscribed), Battery Service from
`battery`, SMP pairing from `pairing`, and `faults.disconnectAfter`.

Usage: peripherals.py --ready FILE SCENARIO.json [SCENARIO.json ...]
Writes FILE (one line per device: address, what it does) once everything
advertises, then runs until SIGTERM.

What Bumble's virtual link cannot carry, and so what this runner does not
reproduce (docs/SCENARIOS.md, "Real-stack runner"):
- every advertisement reaches the scanner at -50 dBm and as connectable
  (LocalLink has no radio; the RSSI timeline is not played);
- there is no scan response: AD structures that do not fit in 31 bytes are
  left out (name shortened or dropped first);
- `connectFailures`, `pairing.delay`, `paired`/`trusted` at start (keys would
  have to be shared with bluetoothd's storage) are not reproduced.
"""

import argparse
import asyncio
import json
import logging
import signal
import sys

from bumble import hci
from bumble.att import ATT_Error
from bumble.controller import Controller
from bumble.core import UUID, PhysicalTransport
from bumble.device import Device, AdvertisingType
from bumble.gatt import Characteristic, CharacteristicValue, Descriptor, Service
from bumble.host import Host
from bumble.link import LocalLink
from bumble.pairing import PairingConfig, PairingDelegate
from bumble.transport import open_transport
from bumble.transport.common import AsyncPipeSink

log = logging.getLogger("peripherals")

# ATT error codes (Core spec Vol 3 Part F 3.4.1.1) for the D-Bus error names a
# scenario's rules give; bluetoothd maps them back to org.bluez.Error.*.
ATT_ERRORS = {
    "NotPermitted": 0x03,        # Write Not Permitted
    "NotAuthorized": 0x08,       # Insufficient Authorization
    "NotSupported": 0x06,        # Request Not Supported
    "InvalidOffset": 0x07,       # Invalid Offset
    "InvalidValueLength": 0x0D,  # Invalid Attribute Value Length
    "NotAvailable": 0x80,        # application error
}
UNLIKELY_ERROR = 0x0E


class ConnectionAddressLink(LocalLink):
    """LocalLink that stamps LE data with the address the connection uses.

    bumble 0.0.236 sends LE ACL data from the sender's random address even on
    a connection made to its public one; the receiver then finds no
    connection and GATT stalls."""

    def send_acl_data(self, sender_controller, destination_address, transport, data):
        if transport == PhysicalTransport.LE:
            connection = sender_controller.le_connections.get(destination_address)
            if connection is not None:
                destination = self.find_le_controller(destination_address)
                source = connection.self_address
                if destination is not None:
                    asyncio.get_running_loop().call_soon(
                        destination.on_link_acl_data, source, transport, data)
                return
        super().send_acl_data(sender_controller, destination_address, transport, data)


def hex_bytes(text):
    s = str(text).strip().lower()
    if s.startswith("0x"):
        s = s[2:]
    return bytes.fromhex(s.replace(" ", "").replace(":", ""))


def uuid_of(text):
    s = str(text).strip().lower()
    if s.startswith("0x"):
        s = s[2:]
    if len(s) == 8 and s.startswith("0000"):
        s = s[4:]
    if len(s) == 36 and s.endswith("-0000-1000-8000-00805f9b34fb") and s.startswith("0000"):
        s = s[4:8]
    return UUID(s.upper() if len(s) == 4 else s)


def integer(value):
    if isinstance(value, str):
        return int(value, 16) if value.lower().startswith("0x") else int(value)
    return int(value)


def value_of(entry, default=b""):
    if "value" in entry:
        return hex_bytes(entry["value"])
    if "text" in entry:
        return str(entry["text"]).encode()
    return default


def ad_structure(ad_type, payload):
    return bytes([len(payload) + 1, ad_type]) + payload


def advertising_data(state):
    """AD structures for the device's current advertised fields, ≤ 31 bytes."""
    parts = [ad_structure(0x01, bytes([0x06]))]
    for key, data in state.get("serviceData", {}).items():
        u = uuid_of(key)
        parts.append(ad_structure(0x16 if len(u.to_bytes()) == 2 else 0x21, u.to_bytes() + hex_bytes(data)))
    for key, data in state.get("manufacturerData", {}).items():
        parts.append(ad_structure(0xFF, integer(key).to_bytes(2, "little") + hex_bytes(data)))
    short = [uuid_of(u).to_bytes() for u in state.get("uuids", []) if len(uuid_of(u).to_bytes()) == 2]
    long = [uuid_of(u).to_bytes() for u in state.get("uuids", []) if len(uuid_of(u).to_bytes()) == 16]
    if short:
        parts.append(ad_structure(0x03, b"".join(short)))
    for u in long:
        parts.append(ad_structure(0x07, u))
    if "txPower" in state:
        parts.append(ad_structure(0x0A, (integer(state["txPower"]) & 0xFF).to_bytes(1, "little")))
    if "appearance" in state:
        parts.append(ad_structure(0x19, integer(state["appearance"]).to_bytes(2, "little")))
    kept = b""
    for p in parts:
        if len(kept) + len(p) <= 31:
            kept += p
    name = state.get("name")
    if name:
        encoded = str(name).encode()
        room = 31 - len(kept) - 2
        if room >= len(encoded):
            kept += ad_structure(0x09, encoded)
        elif room > 0:
            kept += ad_structure(0x08, encoded[:room])
    return kept


SMP_SERVICE = "8d53dc1d-1db7-4cd3-868b-8a527460aa84"
SMP_CHARACTERISTIC = "da2e7828-fbce-4e01-ae9e-261174997c48"


class SMPServer:
    """A Zephyr-like mcumgr server for a scenario device with "smp": requests
    gathered by the 8-byte header's length, answers built by the `smp`
    package (Intercreate's SMP models, the ones smpclient uses) — a
    third-party SMP implementation for our client on the real stack. Two
    slots; echo, MCUmgr parameters, image state read/write, upload (the
    device's offset answers a wrong one), erase, reset (swap a pending
    image). Kept small: what `blecompanion fw` uses."""

    def __init__(self, spec):
        import hashlib
        # Imported here, while the peripherals start (before the ready
        # file), not on the first request: the `smp` models pull in
        # pydantic, and importing them there under software emulation once
        # stalled the whole event loop (no peripheral logged a line) for
        # 15.7 s in CI — longer than our client's three 5-second attempts of
        # `fw state`, whose repeats the peripheral saw only after it gave up.
        import smp.header, smp.image_management, smp.os_management  # noqa: F401
        version = spec.get("version", "1.0.0")
        self.buf_size = int(spec.get("bufferSize", 2475))
        self.buf_count = int(spec.get("bufferCount", 4))
        self.slots = [dict(slot=0, version=version, hash=hashlib.sha256(version.encode()).digest(),
                           bootable=True, pending=False, confirmed=True, active=True, permanent=False)]
        self.upload = None
        self.inbox = b""
        self.reset_requested = False
        # One answer built and thrown away, so the first request does not pay
        # for the models' first use either.
        smp.image_management.ImageStatesReadResponse(sequence=0, images=self.state_images()).BYTES

    def feed(self, data):
        from smp import header as smphdr
        self.inbox += data
        answers = []
        while len(self.inbox) >= smphdr.Header.SIZE:
            h = smphdr.Header.loads(self.inbox[:smphdr.Header.SIZE])
            total = smphdr.Header.SIZE + h.length
            if len(self.inbox) < total:
                break
            frame, self.inbox = self.inbox[:total], self.inbox[total:]
            answers.append(self.answer(h, frame))
        return answers

    def state_images(self):
        from smp import image_management as img
        return [img.ImageState(**s) for s in self.slots if s is not None]

    def answer(self, h, frame):
        import hashlib
        from smp import header as smphdr, image_management as img, os_management as osm
        seq, group, command = h.sequence, h.group_id, h.command_id
        if group == smphdr.GroupId.OS_MANAGEMENT and command == smphdr.CommandId.OSManagement.ECHO:
            return osm.EchoWriteResponse(sequence=seq, r=osm.EchoWriteRequest.loads(frame).d).BYTES
        if group == smphdr.GroupId.OS_MANAGEMENT and command == smphdr.CommandId.OSManagement.MCUMGR_PARAMETERS:
            return osm.MCUMgrParametersReadResponse(sequence=seq, buf_size=self.buf_size, buf_count=self.buf_count).BYTES
        if group == smphdr.GroupId.OS_MANAGEMENT and command == smphdr.CommandId.OSManagement.RESET:
            self.reset_requested = True
            return osm.ResetWriteResponse(sequence=seq).BYTES
        if group == smphdr.GroupId.IMAGE_MANAGEMENT and command == smphdr.CommandId.ImageManagement.STATE:
            if h.op == smphdr.OP.WRITE:
                request = img.ImageStatesWriteRequest.loads(frame)
                for s in self.slots:
                    if s is not None and request.hash is not None and s["hash"] == request.hash and not s["active"]:
                        s["pending"], s["permanent"] = True, bool(request.confirm)
                    elif s is not None and request.hash is None and request.confirm and s["active"]:
                        s["confirmed"] = True
                return img.ImageStatesWriteResponse(sequence=seq, images=self.state_images()).BYTES
            return img.ImageStatesReadResponse(sequence=seq, images=self.state_images()).BYTES
        if group == smphdr.GroupId.IMAGE_MANAGEMENT and command == smphdr.CommandId.ImageManagement.UPLOAD:
            request = img.ImageUploadWriteRequest.loads(frame)
            if request.off == 0:
                if self.upload is None or request.sha is None or self.upload["sha"] != request.sha:
                    self.upload = {"len": request.len, "sha": request.sha, "data": b""}
                    self.slots[1:] = []
                elif self.upload["data"]:
                    return img.ImageUploadWriteResponse(sequence=seq, off=len(self.upload["data"])).BYTES
            if self.upload is None:
                return img.ImageUploadWriteResponse(sequence=seq, off=0).BYTES
            if request.off != len(self.upload["data"]):
                return img.ImageUploadWriteResponse(sequence=seq, off=len(self.upload["data"])).BYTES
            self.upload["data"] += request.data
            done = len(self.upload["data"])
            if done >= self.upload["len"]:
                data = self.upload["data"]
                self.upload = None
                # The version from the MCUboot header (offset 20: major, minor, revision u16, build u32).
                major, minor = data[20], data[21]
                revision = int.from_bytes(data[22:24], "little")
                header_size = int.from_bytes(data[8:10], "little")
                image_size = int.from_bytes(data[12:16], "little")
                digest = hashlib.sha256(data[:header_size + image_size]).digest()
                self.slots.append(dict(slot=1, version=f"{major}.{minor}.{revision}", hash=digest, bootable=True,
                                       pending=False, confirmed=False, active=False, permanent=False))
            return img.ImageUploadWriteResponse(sequence=seq, off=done).BYTES
        return img.ImageUploadWriteResponse(sequence=seq, off=None).BYTES

    def boot(self):
        self.reset_requested = False
        if len(self.slots) > 1 and self.slots[1]["pending"]:
            new, old = self.slots[1], self.slots[0]
            new.update(slot=0, active=True, pending=False, confirmed=new["permanent"])
            old.update(slot=1, active=False)
            self.slots = [new, old]


class Peripheral:
    def __init__(self, spec, link, scenario_name):
        self.spec = spec
        self.address = spec["address"].upper()
        self.random = spec.get("addressType", "public") == "random"
        self.scenario = scenario_name
        self.state = {k: spec[k] for k in ("name", "uuids", "serviceData", "manufacturerData", "txPower", "appearance") if k in spec}
        self.advertising = spec.get("advertisingAtStart", True)
        kind = hci.Address.RANDOM_DEVICE_ADDRESS if self.random else hci.Address.PUBLIC_DEVICE_ADDRESS
        self.controller = Controller(self.address, link=link,
                                     public_address=None if self.random else self.address)
        # The GAP Device Name bluetoothd reads after connecting (the
        # advertisement may carry only a shortened name): the scenario's name.
        self.device = Device(name=spec.get("name"), address=hci.Address(self.address, kind),
                             host=Host(self.controller, AsyncPipeSink(self.controller)))
        if self.random:
            self.device.random_address = hci.Address(self.address, hci.Address.RANDOM_DEVICE_ADDRESS)
        self.characteristics = {}
        self.rules = {}
        self.subscribed = {}
        self.tasks = set()
        self.connections = set()

    def spawn(self, coroutine):
        task = asyncio.get_running_loop().create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.finished)

    def finished(self, task):
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("%s: %r", self.address, task.exception())

    # GATT ----------------------------------------------------------------
    def build_gatt(self):
        services = []
        gatt = list(self.spec.get("gatt", []))
        battery = self.spec.get("battery")
        if battery is not None and not any(uuid_of(s["uuid"]) == uuid_of("180f") for s in gatt):
            percentage = battery["percentage"] if isinstance(battery, dict) else battery
            gatt.append({"uuid": "180f", "characteristics": [
                {"uuid": "2a19", "flags": ["read", "notify"], "value": f"{integer(percentage):02x}"}]})
        for s in gatt:
            characteristics = []
            for c in s.get("characteristics", []):
                characteristics.append(self.build_characteristic(c))
            services.append(Service(uuid_of(s["uuid"]), characteristics, primary=s.get("primary", True)))
        if "smp" in self.spec:
            services.append(self.build_smp(self.spec["smp"]))
        self.device.add_services(services)

    def build_smp(self, spec):
        """The SMP service: writes without response in, answers as notifications of at most MTU - 3 bytes."""
        self.smp = SMPServer(spec)
        holder = {}

        def write(connection, value):
            log.info("%s: SMP write of %d bytes (ATT MTU %d)", self.address, len(value), connection.att_mtu)
            try:
                answers = self.smp.feed(bytes(value))
            except Exception as error:  # as Zephyr's reassembly does with what it cannot read: dropped
                log.warning("%s: SMP request dropped: %r", self.address, error)
                self.smp.inbox = b""
                return
            for answer in answers:
                self.spawn(self.smp_answer(connection, holder["characteristic"], answer))

        characteristic = Characteristic(uuid_of(SMP_CHARACTERISTIC), Characteristic.WRITE_WITHOUT_RESPONSE | Characteristic.NOTIFY,
                                        Characteristic.WRITEABLE, CharacteristicValue(write=write))
        holder["characteristic"] = characteristic
        return Service(uuid_of(SMP_SERVICE), [characteristic])

    async def smp_answer(self, connection, characteristic, answer):
        # One answer at a time, in order (each waits for the last).
        previous = getattr(self, "smp_last", None)
        done = asyncio.get_running_loop().create_future()
        self.smp_last = done
        try:
            if previous is not None:
                await previous
            size = max(20, connection.att_mtu - 3)
            for start in range(0, len(answer), size):
                await self.device.notify_subscriber(connection, characteristic, answer[start:start + size], force=True)
            if self.smp.reset_requested:
                await asyncio.sleep(0.2)
                self.smp.boot()
                await connection.disconnect()
        finally:
            done.set_result(None)

    def build_characteristic(self, c):
        flags = set(c.get("flags", ["read"]))
        props = Characteristic.Properties(0)
        for name, bit in (("broadcast", Characteristic.BROADCAST), ("read", Characteristic.READ),
                          ("write-without-response", Characteristic.WRITE_WITHOUT_RESPONSE),
                          ("write", Characteristic.WRITE), ("notify", Characteristic.NOTIFY),
                          ("indicate", Characteristic.INDICATE),
                          ("authenticated-signed-writes", Characteristic.AUTHENTICATED_SIGNED_WRITES)):
            if name in flags:
                props |= bit
        perms = 0
        if flags & {"read", "encrypt-read", "encrypt-authenticated-read", "secure-read"}:
            perms |= Characteristic.READABLE
        if flags & {"write", "write-without-response", "encrypt-write", "encrypt-authenticated-write",
                    "secure-write", "reliable-write", "authenticated-signed-writes"}:
            perms |= Characteristic.WRITEABLE
        if flags & {"encrypt-read", "encrypt-authenticated-read", "secure-read"}:
            props |= Characteristic.READ
            perms |= Characteristic.READ_REQUIRES_ENCRYPTION
        if flags & {"encrypt-write", "encrypt-authenticated-write", "secure-write"}:
            props |= Characteristic.WRITE
            perms |= Characteristic.WRITE_REQUIRES_ENCRYPTION
        key = uuid_of(c["uuid"])
        holder = {"value": value_of(c), "spec": c}
        read_error = c.get("readError")

        # A strict device: it refuses what its flags do not offer with ATT
        # Read/Write Not Permitted (bluetoothd checks no flags itself).
        readable = bool(perms & Characteristic.READABLE)
        writable = bool(perms & Characteristic.WRITEABLE)

        def read(connection, holder=holder):
            if not readable:
                raise ATT_Error(0x02)
            if read_error is not None:
                raise ATT_Error(att_error_code(read_error))
            return holder["value"]

        def write(connection, value, holder=holder):
            if not writable:
                raise ATT_Error(0x03)
            self.on_write(holder, bytes(value))

        descriptors = []
        for d in c.get("descriptors", []):
            if uuid_of(d["uuid"]) == uuid_of("2902"):
                continue  # Bumble's server adds the CCCD itself
            descriptors.append(Descriptor(uuid_of(d["uuid"]), Descriptor.READABLE, value_of(d)))
        characteristic = Characteristic(key, props, perms, CharacteristicValue(read=read, write=write),
                                        descriptors=descriptors)
        holder["characteristic"] = characteristic
        self.characteristics[key] = holder
        if props & (Characteristic.NOTIFY | Characteristic.INDICATE):
            characteristic.on(characteristic.EVENT_SUBSCRIPTION,
                              lambda bearer, notify, indicate, holder=holder:
                              self.on_subscription(holder, notify or indicate))
        return characteristic

    def on_write(self, holder, value):
        for rule in holder["spec"].get("onWrite", []):
            if "match" in rule and hex_bytes(rule["match"]) != value:
                continue
            if "error" in rule:
                raise ATT_Error(att_error_code(rule["error"]))
            if rule.get("store", True):
                holder["value"] = value
            for action in rule.get("then", []):
                target = self.characteristics.get(uuid_of(action.get("characteristic", holder["spec"]["uuid"])))
                if target is not None:
                    self.spawn(self.set_later(target, hex_bytes(action["value"]), float(action.get("after", 0))))
            return
        holder["value"] = value

    async def set_later(self, holder, value, after):
        await asyncio.sleep(after)
        await self.set_value(holder, value)

    async def set_value(self, holder, value):
        holder["value"] = value
        characteristic = holder["characteristic"]
        try:
            if characteristic.properties & Characteristic.NOTIFY:
                await self.device.notify_subscribers(characteristic, value, force=True)
            elif characteristic.properties & Characteristic.INDICATE:
                await self.device.indicate_subscribers(characteristic, value, force=True)
        except Exception as error:  # a subscriber that went away mid-send
            log.info("%s: notification not sent: %s", self.address, error)

    def on_subscription(self, holder, enabled):
        key = id(holder)
        running = self.subscribed.pop(key, None)
        if running is not None:
            running.cancel()
        timeline = holder["spec"].get("notifications")
        if enabled and timeline:
            task = asyncio.get_running_loop().create_task(self.play_notifications(holder, timeline))
            self.subscribed[key] = task

    async def play_notifications(self, holder, timeline):
        async def notify(event):
            await self.set_value(holder, hex_bytes(event["value"]))
        await play(timeline, notify)

    # Advertising -----------------------------------------------------------
    async def advertise(self):
        await self.device.stop_advertising()
        if not self.advertising:
            return
        log.info("%s: advertising", self.address)
        await self.device.start_advertising(
            advertising_type=AdvertisingType.UNDIRECTED_CONNECTABLE_SCANNABLE,
            own_address_type=hci.OwnAddressType.RANDOM if self.random else hci.OwnAddressType.PUBLIC,
            auto_restart=True,
            advertising_data=advertising_data(self.state),
            advertising_interval_min=250, advertising_interval_max=250)

    async def play_advertising(self):
        async def apply(event):
            changed = False
            for field in ("name", "uuids", "serviceData", "manufacturerData", "txPower"):
                if field in event and self.state.get(field) != event[field]:
                    self.state[field] = event[field]
                    changed = True
            if "present" in event and bool(event["present"]) != self.advertising:
                self.advertising = bool(event["present"])
                changed = True
            if changed and not self.connections:
                await self.advertise()
        if self.spec.get("advertising"):
            await play(self.spec["advertising"], apply)

    # Connections and pairing -------------------------------------------------
    def configure_pairing(self):
        pairing = self.spec.get("pairing", {})
        method = pairing.get("method", "none")
        accept = pairing.get("accept", True)
        passkey = integer(pairing["passkey"]) if "passkey" in pairing else 0
        capability = {
            "none": PairingDelegate.NO_OUTPUT_NO_INPUT,
            "justWorks": PairingDelegate.NO_OUTPUT_NO_INPUT,
            "requestConfirmation": PairingDelegate.DISPLAY_OUTPUT_AND_YES_NO_INPUT,
            "requestPasskey": PairingDelegate.DISPLAY_OUTPUT_ONLY,
            "displayPasskey": PairingDelegate.KEYBOARD_INPUT_ONLY,
        }.get(method, PairingDelegate.NO_OUTPUT_NO_INPUT)

        class Delegate(PairingDelegate):
            async def accept(self):
                return accept

            async def confirm(self, auto=False):
                return accept

            async def compare_numbers(self, number, digits):
                return accept

            async def generate_passkey(self):
                return passkey

            async def get_number(self):
                return passkey if accept else None

        self.device.pairing_config_factory = lambda connection: PairingConfig(
            sc=True, mitm=method not in ("none", "justWorks"), bonding=True,
            delegate=Delegate(io_capability=capability))

    def on_connection(self, connection):
        log.info("%s: connected to %s", self.address, connection.peer_address)
        self.connections.add(connection)
        connection.on(connection.EVENT_DISCONNECTION, lambda reason: self.on_disconnection(connection))
        after = self.spec.get("faults", {}).get("disconnectAfter")
        if after is not None:
            self.spawn(self.drop_later(connection, float(after)))

    def on_disconnection(self, connection):
        log.info("%s: disconnected", self.address)
        self.connections.discard(connection)
        for task in self.subscribed.values():
            task.cancel()
        self.subscribed.clear()
        # A Bumble peripheral stays silent after a disconnection unless told
        # to advertise again (as a real one does).
        self.spawn(self.advertise())

    async def drop_later(self, connection, after):
        await asyncio.sleep(after)
        if connection in self.connections:
            try:
                await connection.disconnect()
            except Exception as error:
                log.info("%s: drop failed: %s", self.address, error)

    async def start(self):
        self.build_gatt()
        self.configure_pairing()
        self.device.on(self.device.EVENT_CONNECTION, self.on_connection)
        await self.device.power_on()
        await self.advertise()
        self.spawn(self.play_advertising())

    def describe(self):
        what = ["advertising" if self.advertising else "silent until its timeline"]
        if self.spec.get("gatt") or self.spec.get("battery") is not None:
            what.append("GATT")
        if "pairing" in self.spec:
            what.append("pairing " + self.spec["pairing"].get("method", "none"))
        return f"{self.address} {self.spec.get('name', '-')} ({self.scenario}): {', '.join(what)}"


async def play(timeline, apply):
    """Plays a scenario timeline ({"timeline": [{"at": …}], "repeatEvery"}),
    calling apply(event) at each event's time, over and over if it repeats."""
    events = sorted(timeline.get("timeline", []), key=lambda e: float(e["at"]))
    period = timeline.get("repeatEvery")
    while True:
        elapsed = 0.0
        for event in events:
            await asyncio.sleep(max(0.0, float(event["at"]) - elapsed))
            elapsed = float(event["at"])
            await apply(event)
        if not period:
            return
        await asyncio.sleep(max(0.0, float(period) - elapsed))


def att_error_code(error):
    name = error["name"] if isinstance(error, dict) else str(error)
    return ATT_ERRORS.get(name.rsplit(".", 1)[-1], UNLIKELY_ERROR)


async def keep_links_in_step(adapter, peripherals):
    """Ends a peripheral's side of a link the adapter's side no longer has.

    Seen in the VM with bumble 0.0.236: after bluetoothd disconnected a
    device (Disconnection Complete reached the kernel, Connected=false on
    D-Bus), the peripheral's controller kept its connection and so never
    advertised again. A real device notices the link is gone (supervision
    timeout); this does the same, once a second."""
    suspects = set()
    while True:
        await asyncio.sleep(1)
        for p in peripherals:
            for connection in list(p.controller.le_connections.values()):
                if adapter.le_connections.get(connection.self_address) is not None:
                    suspects.discard(id(connection))
                elif id(connection) not in suspects:
                    suspects.add(id(connection))  # twice in a row: not a link still being set up
                else:
                    suspects.discard(id(connection))
                    log.warning("%s: the adapter has no link to it any more; ending the peripheral's side",
                                p.address)
                    p.controller.on_le_disconnected(connection, 0x08)  # Connection Timeout


async def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ready", required=True, help="file written once every peripheral advertises")
    parser.add_argument("--vhci", default="vhci", help="Bumble transport for bluetoothd's controller")
    parser.add_argument("scenarios", nargs="+")
    args = parser.parse_args()

    adapter_address = None
    specs = []
    for path in args.scenarios:
        try:
            with open(path) as f:
                scenario = json.load(f)
        except (OSError, ValueError) as error:
            print(f"peripherals: {path}: {error}", file=sys.stderr)
            return 1
        adapters = scenario.get("adapters") or [{}]
        if adapter_address is None and adapters[0].get("address"):
            adapter_address = adapters[0]["address"]
        specs += [(d, scenario.get("name", path)) for d in scenario.get("devices", [])]

    link = ConnectionAddressLink()
    transport = await open_transport(args.vhci)
    adapter = Controller("adapter", host_source=transport.source, host_sink=transport.sink, link=link,
                         public_address=adapter_address or "00:1A:7D:DA:71:13")
    peripherals = [Peripheral(spec, link, name) for spec, name in specs]
    for p in peripherals:
        await p.start()
    with open(args.ready, "w") as f:
        for p in peripherals:
            f.write(p.describe() + "\n")

    asyncio.get_running_loop().create_task(keep_links_in_step(adapter, peripherals))
    stop = asyncio.get_running_loop().create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))
    await stop
    await transport.close()
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s peripherals %(levelname)s %(message)s")
    log.setLevel(logging.INFO)
    sys.exit(asyncio.run(main()))
