import GRDB

/// Another connection to one of the gateway's store files: a test's
/// stand-in for whatever else writes to it (here, triggers that make the
/// disk look full, added and dropped while the store is busy). It waits up
/// to 10 s behind the store's own write transaction, as any second writer
/// must; with GRDB's default it failed at once with "database is locked",
/// which failed a test in CI.
func secondConnection(to path: String) throws -> DatabaseQueue {
    var configuration = Configuration()
    configuration.busyMode = .timeout(10)
    return try DatabaseQueue(path: path, configuration: configuration)
}
