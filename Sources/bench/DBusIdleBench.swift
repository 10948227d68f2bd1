import DBus

/// `bench dbus-idle [SECONDS]`: CPU used by a process holding open D-Bus
/// connections (a client with a signal subscription and a name-owner watch,
/// and a server with an exported ObjectManager tree) while nothing happens.
/// The I/O threads sleep in epoll_wait, so this should be zero.
enum DBusIdleBench {
    static func run(_ arguments: [String]) async -> Int32 {
        let seconds = arguments.first.flatMap { Double($0) } ?? 3
        do {
            let bus = try PrivateBus.start()
            defer { bus.stop() }
            let server = try await DBusConnection.connect(to: .address(bus.address))
            let client = try await DBusConnection.connect(to: .address(bus.address))
            _ = try await server.requestName("org.bluez")
            let manager = try await server.exportObjectManager(at: .root)
            let object = try await server.export("/org/bluez/hci0", interfaces: [
                DBusExportedInterface(DBusInterfaceDescription("org.bluez.Adapter1", properties: [
                    DBusPropertyDescription("Powered", .boolean),
                ]), values: ["Powered": .boolean(true)]),
            ])
            let signals = try await client.signals(matching: DBusMatchRule(sender: "org.bluez", pathNamespace: "/org/bluez"))
            let owners = try await client.nameOwnerChanges(of: "org.bluez")
            let before = DBusReceiveBench.cpuSeconds()
            try await Task.sleep(for: .milliseconds(Int(seconds * 1000)))
            let used = DBusReceiveBench.cpuSeconds() - before
            printFlushed("{\"bench\":\"dbus-idle\",\"seconds\":\(seconds),\"cpu_s\":\(used),\"connections\":2}")
            _ = (manager, object, signals, owners)
            return 0
        } catch {
            writeError("bench dbus-idle: \(error)")
            return 1
        }
    }
}
