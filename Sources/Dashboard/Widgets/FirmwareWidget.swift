import BLEParsing
import Domain
import Foundation
import Presenters
import TerminalUI
import Vocabulary

/// The firmware screen: the device's image slots, the image chosen to
/// flash, the upload's progress (a bar, rate, ETA) or the last job's end,
/// and the keys. Provisioning's SSID and password are asked on the input line.
struct FirmwareWidget: Widget {
    let view: DashboardView

    func draw(in area: Rect, _ b: inout Buffer) {
        let title = "Firmware — " + (view.detail?.device.value?.name ?? view.firmware?.device.address.description ?? "")
        b.box(area, title: title, style: Theme.border, titleStyle: Theme.title)
        let inner = area.inset(1)
        guard let s = view.firmware else {
            centered("Firmware updates are not available here.", in: inner, &b, style: Theme.dim)
            return
        }
        var lines: [(String, Style)] = [("Images on the device", Theme.title)]
        switch s.slots {
        case .loading: lines.append(("  reading… \(spinnerFrame(view.spinner))", Theme.dim))
        case .failed, .unavailable: lines.append(("  ⚠ \(s.slots.problem ?? "")", Theme.warn))
        case let .loaded(slots):
            if slots.isEmpty { lines.append(("  none", Theme.dim)) }
            for slot in slots {
                let flags = slot.flags.isEmpty ? "" : "  " + slot.flags.joined(separator: " ")
                lines.append(("  slot \(slot.slot)  \(slot.version)\(flags)", slot.active ? Theme.ok : .plain))
                lines.append(("          \(Hex.string(slot.hash.prefix(16)))…", Theme.dim))
            }
        }
        lines.append(("", .plain))
        if let image = s.image {
            lines.append(("Image  \(image.name)  \(image.version)  \(Format.bytes(image.bytes))  \(image.signature ?? "unsigned")", Theme.title))
            if let hash = image.hash { lines.append(("       hash \(Hex.string(hash.prefix(16)))…", Theme.dim)) }
        } else {
            lines.append(("Image  none chosen: o to choose a file", Theme.dim))
        }
        if let problem = s.imageProblem { lines.append(("⚠ \(problem)", Theme.warn)) }
        lines.append(("", .plain))
        switch s.job {
        case .idle: break
        case let .uploading(p):
            let width = max(10, min(40, inner.width - 50))
            let filled = Int(p.fraction * Double(width))
            let bar = String(repeating: "█", count: filled) + String(repeating: "░", count: width - filled)
            let eta = p.eta.map { "ETA \(Int($0.rounded())) s" } ?? "ETA …"
            lines.append(("\(bar) \(String(format: "%5.1f", p.fraction * 100)) %", Theme.accent))
            var detail = "\(Format.bytes(p.acknowledged)) of \(Format.bytes(p.total))  \(String(format: "%.1f", p.bytesPerSecond / 1024)) KiB/s  \(eta)"
            if let r = p.resumedFrom { detail += "  resumed from \(Format.bytes(r))" }
            if p.reconnects > 0 { detail += "  \(p.reconnects) reconnection\(p.reconnects == 1 ? "" : "s")" }
            lines.append((detail, .plain))
        case .marking: lines.append(("Marking the image… \(spinnerFrame(view.spinner))", Theme.warn))
        case .resetting: lines.append(("Resetting the device… \(spinnerFrame(view.spinner))", Theme.warn))
        case .provisioning: lines.append(("Sending Wi-Fi credentials… \(spinnerFrame(view.spinner))", Theme.warn))
        case let .finished(text): lines.append(("✓ \(text)", Theme.ok))
        case let .cancelled(at, total):
            lines.append(("Stopped at \(Format.bytes(at)) of \(Format.bytes(total)): the running image is untouched; u resumes.", Theme.warn))
        case let .failed(text): lines.append(("✗ \(text)", Theme.error))
        }
        if let last = s.lastUpload {
            var text = "Last upload: \(Format.bytes(last.bytes)) in \(String(format: "%.1f", last.seconds)) s (\(String(format: "%.1f", last.bytesPerSecond / 1024)) KiB/s)"
            if let r = last.resumedFrom { text += ", resumed from \(Format.bytes(r))" }
            lines.append((text, Theme.dim))
        }
        for (i, line) in lines.enumerated() where i < inner.height {
            b.put(line.0, x: inner.x + 1, y: inner.y + i, width: inner.width - 2, style: line.1)
        }
    }
}
