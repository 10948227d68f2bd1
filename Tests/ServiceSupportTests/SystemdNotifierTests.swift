import Foundation
import Testing
@testable import ServiceSupport
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

@Suite struct SystemdNotifierTests {
    @Test func sendsEachNotificationAsOneDatagramToASocketFile() throws {
        let directory = try TemporaryDirectory()
        let receiver = try DatagramReceiver(path: directory.file("notify"))
        let notifier = SystemdNotifier(environment: ["NOTIFY_SOCKET": directory.file("notify")])
        #expect(notifier.destination == .path(directory.file("notify")))

        #expect(notifier.ready())
        #expect(notifier.status("2 adapters, 7 devices"))
        #expect(notifier.watchdog())
        #expect(notifier.ready(status: "publishing to 127.0.0.1:1883"))
        #expect(notifier.stopping())
        #expect(notifier.stopping(status: "draining the outbox"))

        #expect(receiver.drain() == [
            "READY=1",
            "STATUS=2 adapters, 7 devices",
            "WATCHDOG=1",
            "READY=1\nSTATUS=publishing to 127.0.0.1:1883",
            "STOPPING=1",
            "STOPPING=1\nSTATUS=draining the outbox",
        ])
    }

    @Test func sendsToAnAbstractSocketWhenTheAddressStartsWithAt() throws {
        let name = "blecompanion-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let receiver = try DatagramReceiver(abstractName: name)
        let notifier = SystemdNotifier(environment: ["NOTIFY_SOCKET": "@" + name])
        #expect(notifier.destination == .abstract(name))

        #expect(notifier.ready(status: "ready"))
        #expect(notifier.watchdog())
        #expect(receiver.drain() == ["READY=1\nSTATUS=ready", "WATCHDOG=1"])
    }

    @Test func aStatusCannotSmuggleAnotherAssignment() throws {
        let directory = try TemporaryDirectory()
        let receiver = try DatagramReceiver(path: directory.file("notify"))
        let notifier = SystemdNotifier(environment: ["NOTIFY_SOCKET": directory.file("notify")])

        #expect(notifier.status("device \"Kitchen\nREADY=1\""))
        #expect(notifier.status("a\r\nb\rc"))
        #expect(receiver.drain() == ["STATUS=device \"Kitchen READY=1\"", "STATUS=a b c"])
    }

    @Test func withoutNotifySocketEverythingIsANoOp() async {
        let notifier = SystemdNotifier(environment: ["WATCHDOG_USEC": "1000"])
        #expect(!notifier.isActive)
        #expect(notifier.destination == nil)
        #expect(!notifier.ready())
        #expect(!notifier.watchdog())
        // Returns at once instead of pinging nobody every 0.5 ms.
        let task = Task { await notifier.runWatchdog() }
        #expect(await finishes(task, within: .seconds(5)))
    }

    @Test func unusableSocketAddressesMakeItInactiveAndAreLogged() {
        let (logger, store) = CapturingLogHandler.logger()
        let tooLong = "/tmp/" + String(repeating: "x", count: 120)
        for value in [tooLong, "relative/notify", "vsock:2:1234", "@"] {
            let notifier = SystemdNotifier(environment: ["NOTIFY_SOCKET": value], logger: logger)
            #expect(!notifier.isActive, "\(value)")
        }
        #expect(store.all.count == 4)
        #expect(store.all.allSatisfy { $0.level == .warning })
        #expect(!SystemdNotifier(environment: ["NOTIFY_SOCKET": ""]).isActive)
    }

    @Test func theLongestPathThatFitsIsAccepted() {
        // sun_path is 108 bytes: 107 for the path and its terminating NUL.
        let longest = "/tmp/" + String(repeating: "x", count: 102)
        #expect(longest.utf8.count == 107)
        #expect(SystemdNotifier(environment: ["NOTIFY_SOCKET": longest]).isActive)
        #expect(!SystemdNotifier(environment: ["NOTIFY_SOCKET": longest + "x"]).isActive)
    }

    @Test func aFailedSendIsLoggedAndReportedNotThrown() throws {
        let directory = try TemporaryDirectory()
        let (logger, store) = CapturingLogHandler.logger()
        // Nobody listens there.
        let notifier = SystemdNotifier(environment: ["NOTIFY_SOCKET": directory.file("gone")], logger: logger)
        #expect(notifier.isActive)
        #expect(!notifier.ready())
        let entries = store.all
        #expect(entries.count == 1)
        #expect(entries.first?.level == .error)
        #expect(entries.first?.metadata["call"] == "sendto")
        #expect(entries.first?.metadata["notification"] == "READY=1")
        #expect(entries.first?.metadata["reason"] == "No such file or directory")
    }

    @Test(arguments: [
        ("30000000", nil as String?, Duration.seconds(30) as Duration?),
        ("1500", nil, .microseconds(1500)),
        ("30000000", "self", .seconds(30)),
        ("30000000", "other", nil),
        ("30000000", "not-a-pid", nil),
        ("0", nil, nil),
        ("-5", nil, nil),
        ("30s", nil, nil),
        ("", nil, nil),
    ])
    func watchdogIntervalFromEnvironment(usec: String, pid: String?, expected: Duration?) {
        var environment = ["WATCHDOG_USEC": usec]
        switch pid {
        case "self": environment["WATCHDOG_PID"] = String(getpid())
        case "other": environment["WATCHDOG_PID"] = String(getpid() + 1)
        case let other?: environment["WATCHDOG_PID"] = other
        case nil: break
        }
        #expect(SystemdNotifier(environment: environment).watchdogInterval == expected)
    }

    @Test func noWatchdogWithoutWatchdogUsec() {
        #expect(SystemdNotifier(environment: ["NOTIFY_SOCKET": "/run/x", "WATCHDOG_PID": String(getpid())]).watchdogInterval == nil)
    }

    @Test func watchdogLoopPingsEveryHalfIntervalAndStopsWhenCancelled() async throws {
        let directory = try TemporaryDirectory()
        let receiver = try DatagramReceiver(path: directory.file("notify"))
        let notifier = SystemdNotifier(environment: [
            "NOTIFY_SOCKET": directory.file("notify"),
            "WATCHDOG_USEC": "100000",  // 100 ms: a ping every 50 ms
            "WATCHDOG_PID": String(getpid()),
        ])
        #expect(notifier.watchdogInterval == .milliseconds(100))

        let started = ContinuousClock.now
        let task = Task { await notifier.runWatchdog() }
        let pings = try await offPool { () -> [Ping] in
            (0..<3).map { _ in Ping(message: receiver.receive(timeoutMilliseconds: 30_000), at: .now) }
        }
        #expect(pings.map(\.message) == ["WATCHDOG=1", "WATCHDOG=1", "WATCHDOG=1"])
        // It sleeps between pings (half the interval): over any stretch there are at most
        // elapsed/50 ms + 1 of them, never a burst. (Gaps between receive times are not
        // checked: on a loaded machine the receiving thread may read two at once.)
        let fourth = try await offPool { receiver.receive(timeoutMilliseconds: 30_000) }
        #expect(fourth == "WATCHDOG=1", "it keeps pinging")
        let elapsed = ContinuousClock.now - started
        let total = 4 + receiver.drain().count
        let most = Int(elapsed / .milliseconds(50)) + 1
        #expect(total <= most, "\(total) pings in \(elapsed): more than one per 50 ms")

        task.cancel()
        #expect(await finishes(task, within: .seconds(5)))
        _ = receiver.drain()
        try await Task.sleep(for: .milliseconds(200))
        #expect(receiver.receiveNow() == nil, "pinged after being cancelled")
    }

    struct Ping: Sendable {
        let message: String?
        let at: ContinuousClock.Instant
    }
}
