import TerminalUI

/// The dashboard's content: a pure function from what to show and the
/// terminal's size to a buffer of cells. No I/O, no clocks (the time is in
/// the view), so every screen can be snapshot-tested from a fixed state.
///
/// It lays the frame out once (`DashboardLayout`) and has each widget draw
/// into its rectangle (Widgets/): the header bar, the current screen, any
/// dialog over it, the status line and the key footer.
public enum DashboardContent {
    public static let minimumWidth = 60
    public static let minimumHeight = 16

    public static func render(_ view: DashboardView, width: Int, height: Int) -> Buffer {
        render(view, layout: DashboardLayout(width: width, height: height))
    }

    public static func render(_ view: DashboardView, layout: DashboardLayout) -> Buffer {
        render(view, layout: layout, rowCache: nil)
    }

    /// As ``render(_:layout:)``, reusing the device-list rows that `rowCache`
    /// kept from the last frame where they are unchanged (the app's loop).
    static func render(_ view: DashboardView, layout: DashboardLayout, rowCache: DeviceRowCache?) -> Buffer {
        var b = Buffer(width: layout.width, height: layout.height)
        guard !layout.tooSmall else {
            TooSmallMessage().draw(in: layout.screen, &b)
            return b
        }
        HeaderBar(view: view).draw(in: layout.header, &b)
        switch view.screen {
        case .deviceList: DeviceListWidget(view: view, rowCache: rowCache).draw(in: layout.body, &b)
        case .deviceDetail, .pairing: DeviceDetailWidget(view: view).draw(in: layout.body, &b)
        case .eventLog: EventLogWidget(view: view).draw(in: layout.body, &b)
        case .adapters: AdaptersWidget(view: view).draw(in: layout.body, &b)
        case .firmware: FirmwareWidget(view: view).draw(in: layout.body, &b)
        }
        if case .pairing = view.screen, let p = view.pairing { PairingDialog(state: p, view: view).draw(in: layout.screen, &b) }
        if view.detail?.confirming == .forget, case .deviceDetail = view.screen { ForgetDialog(view: view).draw(in: layout.screen, &b) }
        StatusLine(view: view).draw(in: layout.statusLine, &b)
        KeyFooter(view: view).draw(in: layout.footer, &b)
        if view.help { HelpOverlay(context: view.context == .help ? helpContext(view) : view.context).draw(in: layout.screen, &b) }
        return b
    }

    /// The context whose bindings the help overlay lists (the one under it).
    static func helpContext(_ view: DashboardView) -> KeyContext {
        var under = view
        under.help = false
        return under.context
    }
}
