import BLEParsing
import BlueZ
import Domain
import Foundation
import Presenters
import TerminalUI

/// A box centred in `area`, at most `width` × `height` and 2 cells clear
/// of each edge.
func dialogRect(in area: Rect, width: Int, height: Int) -> Rect {
    let w = min(area.width - 4, width), h = min(area.height - 4, height)
    return Rect(x: area.x + (area.width - w) / 2, y: area.y + (area.height - h) / 2, width: w, height: h)
}

/// The pairing dialog over the device screen: the agent's question, the
/// passkey field, or how pairing ended.
struct PairingDialog: Widget {
    let state: PairingPresenter.State
    let view: DashboardView

    func draw(in area: Rect, _ b: inout Buffer) {
        let p = state
        let r = dialogRect(in: area, width: 56, height: 9)
        b.fill(r, style: .plain)
        let name = view.detail?.device.value?.name ?? p.device.address.description
        b.box(r, title: "Pairing with \(name)", style: Theme.accent, titleStyle: Theme.title)
        let inner = r.inset(1).inset(0)
        var lines: [(String, Style)] = []
        switch p.phase {
        case .idle:
            lines = [("Starting…", Theme.dim)]
        case .pairing(nil):
            lines = [("Pairing… \(spinnerFrame(view.spinner))", Theme.warn), ("bluetoothd is talking to the device.", Theme.dim), ("", .plain), ("Esc cancels.", Theme.dim)]
        case let .pairing(question?):
            switch question {
            case .enterPasskey, .enterPIN:
                let what = question == .enterPasskey ? "the 6-digit passkey the device shows" : "the device's PIN code"
                lines = [("Enter \(what):", .plain), ("", .plain), ("  [ \(TextWidth.pad(p.input + "▏", to: 18)) ]", Theme.key),
                         (p.inputProblem ?? "", Theme.dim), ("Enter submits · Esc cancels", Theme.dim)]
            case let .confirmPasskey(code):
                lines = [("Does the device show this passkey?", .plain), ("", .plain), ("      \(code)", Theme.title), ("", .plain),
                         ("y confirm · n reject · Esc cancel", Theme.dim)]
            case .authorize:
                lines = [("The device asks to pair without a code.", .plain), ("Allow it?", .plain), ("", .plain), ("y allow · n reject", Theme.dim)]
            case let .authorizeService(uuid):
                let service = AttributeDecoding.name(of: uuid).map { "\($0) (\(Format.shortUUID(uuid)))" } ?? Format.shortUUID(uuid)
                lines = [("The device wants to use a service:", .plain), ("  \(service)", Theme.title), ("", .plain), ("y allow · n reject", Theme.dim)]
            case let .typeOnDevice(code):
                lines = [("Type this code on the device:", .plain), ("", .plain), ("      \(code)", Theme.title), ("", .plain),
                         ("Waiting for the device… Esc cancels", Theme.dim)]
            }
        case .paired:
            lines = [("✓ Paired with \(name).", Theme.ok), ("", .plain), ("Esc closes.", Theme.dim)]
        case let .failed(reason):
            lines = [("✗ Pairing failed:", Theme.error), (reason, .plain), ("", .plain), ("Esc closes.", Theme.dim)]
        }
        for (i, line) in lines.enumerated() where i < inner.height {
            b.put(line.0, x: inner.x + 1, y: inner.y + i, width: inner.width - 2, style: line.1)
        }
    }
}

/// "Forget device?" over the device screen.
struct ForgetDialog: Widget {
    let view: DashboardView

    func draw(in area: Rect, _ b: inout Buffer) {
        let r = dialogRect(in: area, width: 52, height: 7)
        b.fill(r, style: .plain)
        b.box(r, title: "Forget device", style: Theme.warn, titleStyle: Theme.title)
        let name = view.detail?.device.value?.name ?? view.detail?.id.address.description ?? ""
        let inner = r.inset(1)
        b.put("Remove \(name) from bluetoothd?", x: inner.x + 1, y: inner.y, width: inner.width - 2)
        b.put("Its pairing keys are deleted too.", x: inner.x + 1, y: inner.y + 1, width: inner.width - 2, style: Theme.dim)
        b.put("y forget · n keep", x: inner.x + 1, y: inner.y + 3, width: inner.width - 2, style: Theme.key)
    }
}

/// The keys of a context, in one or two columns.
struct HelpOverlay: Widget {
    let context: KeyContext

    func draw(in area: Rect, _ b: inout Buffer) {
        let bindings = KeyMap.bindings(context)
        // One column when it fits, else two.
        let maxRows = area.height - 4 - 3
        let columns = bindings.count > maxRows ? 2 : 1
        let perColumn = (bindings.count + columns - 1) / columns
        let r = dialogRect(in: area, width: columns == 1 ? 64 : 78, height: perColumn + 3)
        b.fill(r, style: .plain)
        b.box(r, title: "Keys — \(contextName(context))", style: Theme.accent, titleStyle: Theme.title)
        let inner = r.inset(1)
        let columnWidth = inner.width / columns
        for (i, binding) in bindings.enumerated() {
            let column = i / perColumn, row = i % perColumn
            guard row < inner.height - 1 else { continue }
            let x = inner.x + 1 + column * columnWidth
            let keyWidth = columns == 1 ? 12 : 10
            b.put(TextWidth.pad(binding.keyLabel, to: keyWidth), x: x, y: inner.y + row, style: Theme.key)
            b.put(binding.description, x: x + keyWidth + 1, y: inner.y + row, width: columnWidth - keyWidth - 2)
        }
        b.put("Esc or ? closes", x: inner.x + 1, y: inner.maxY - 1, width: inner.width - 2, style: Theme.dim)
    }

    func contextName(_ c: KeyContext) -> String {
        switch c {
        case .deviceList: return "device list"
        case .deviceDetail: return "device"
        case .pairing: return "pairing"
        case .eventLog: return "event log"
        case .adapters: return "adapters"
        case .firmware: return "firmware"
        case .input: return "text field"
        case .help: return "help"
        case .confirm: return "confirmation"
        }
    }
}
