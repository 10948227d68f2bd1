"""Provision a device over Improv with Home Assistant's client (py-improv-ble-client).

Used by scripts/check-improv against our simulated devices:

    provision.py ADDRESS SSID PASSWORD_FILE EXPECT

EXPECT is the URL the device must answer, or "fail:NAME" for the Improv
error it must report (e.g. fail:UNABLE_TO_CONNECT). The device is found by
bleak's scanner, which also checks what it advertises (Improv's service UUID
and service data, as the client's device_filter wants).
"""
import asyncio
import sys

from bleak import BleakScanner
from improv_ble_client import ImprovBLEClient, device_filter
from improv_ble_client.errors import ProvisioningFailed


async def main(address: str, ssid: str, password_file: str, expect: str) -> int:
    password = open(password_file, encoding="utf-8").read().rstrip("\n")
    found = asyncio.get_running_loop().create_future()

    def seen(device, advertisement):
        if device.address.upper() == address.upper() and device_filter(advertisement) and not found.done():
            found.set_result((device, advertisement))

    async with BleakScanner(detection_callback=seen):
        device, advertisement = await asyncio.wait_for(found, 20)
    client = ImprovBLEClient(device, advertisement)
    states = []
    if await client.need_authorization():
        # As Home Assistant's flow does: wait for the button press.
        authorized = asyncio.get_running_loop().create_future()

        def on_state(state):
            if state.name == "AUTHORIZED" and not authorized.done():
                authorized.set_result(True)

        unsubscribe = await client.subscribe_state_updates(on_state)
        await asyncio.wait_for(authorized, 20)
        unsubscribe()
        states.append("AUTHORIZED")
    try:
        url = await client.provision(ssid, password, states.append)
    except ProvisioningFailed as err:
        outcome = f"fail:{err.error.name}"
    else:
        outcome = url or ""
    finally:
        await client.disconnect() if hasattr(client, "disconnect") else None
    print(f"{address}: {outcome} (states {[getattr(s, 'name', s) for s in states]})")
    return 0 if outcome == expect else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(*sys.argv[1:5])))
