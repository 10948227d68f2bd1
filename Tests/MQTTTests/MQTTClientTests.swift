import Foundation
import Testing
import TestSupport
import Locking
@testable import MQTT

/// Connected again after having been disconnected.
func reconnected(_ states: [MQTTConnectionState]) -> Bool {
    states.count >= 3 && states.last == .connected
}

/// Every test starts its own mosquitto on a free loopback port (``Broker``):
/// no fixed ports, never the system broker, safe next to other suites.
@Suite(.timeLimit(.minutes(2))) struct MQTTClientTests {
    func configuration(_ broker: Broker, _ clientID: String, _ change: (inout MQTTConfiguration) -> Void = { _ in }) -> MQTTConfiguration {
        var c = MQTTConfiguration(host: "127.0.0.1", port: broker.port, clientID: clientID, keepAlive: 5, reconnectDelayMin: 1, reconnectDelayMax: 2)
        change(&c)
        return c
    }

    @Test func qos1MessageReachesAnotherClientsSubscriptionAndWildcardsFilterTopics() async throws {
        try await withBroker { broker in
            let publisher = try await MQTTClient.connect(configuration(broker, "pub"))
            // One client per filter: a broker may deliver once per matching
            // subscription when one client's filters overlap.
            let plusClient = try await MQTTClient.connect(configuration(broker, "sub-plus"))
            let hashClient = try await MQTTClient.connect(configuration(broker, "sub-hash"))
            let plus = Inbox(try await plusClient.subscribe("home/+/temp", qos: .atLeastOnce))
            let hash = Inbox(try await hashClient.subscribe("home/#", qos: .exactlyOnce))

            let binary: [UInt8] = [0x00, 0x01, 0x7F, 0x80, 0xFF]
            try await publisher.publish(MQTTMessage(topic: "home/kitchen/temp", payload: binary, qos: .atLeastOnce))
            try await publisher.publish(MQTTMessage(topic: "home/kitchen/humidity", text: "41", qos: .atLeastOnce))
            try await publisher.publish(MQTTMessage(topic: "office/kitchen/temp", text: "no", qos: .atLeastOnce))
            try await publisher.publish(MQTTMessage(topic: "home/a/b/temp", text: "deep", qos: .atLeastOnce))
            try await publisher.publish(MQTTMessage(topic: "home/end/temp", text: "end", qos: .atLeastOnce))

            let plusGot = await plus.wait { $0.contains { $0.topic == "home/end/temp" } }
            let hashGot = await hash.wait { $0.contains { $0.topic == "home/end/temp" } }
            // Exact: payload bytes, QoS min(publish, subscription), retain false.
            #expect(plusGot.first == MQTTMessage(topic: "home/kitchen/temp", payload: binary, qos: .atLeastOnce, retain: false))
            // `+` is one level: not humidity, not two levels, not another root.
            #expect(plusGot.map(\.topic) == ["home/kitchen/temp", "home/end/temp"])
            // `#` is any depth under home/, and nothing outside it.
            #expect(hashGot.map(\.topic) == ["home/kitchen/temp", "home/kitchen/humidity", "home/a/b/temp", "home/end/temp"])
            #expect(hashGot.first?.payload == binary)
            #expect(hashGot.dropFirst().first?.text == "41")

            await publisher.disconnect()
            await plusClient.disconnect()
            await hashClient.disconnect()
        }
    }

    @Test func aPipelinedBatchArrivesWholeAndInOrder() async throws {
        try await withBroker { broker in
            let publisher = try await MQTTClient.connect(configuration(broker, "batch-pub"))
            let subscriber = try await MQTTClient.connect(configuration(broker, "batch-sub"))
            let inbox = Inbox(try await subscriber.subscribe("batch/#", qos: .atLeastOnce))
            // More than libmosquitto's default 20 in flight. (All QoS 1, as the
            // outbox sends them: libmosquitto sends QoS 0 past its queue of
            // QoS 1 messages waiting for an in-flight slot.)
            let messages = (0..<300).map { i in MQTTMessage(topic: "batch/\(i % 7)", text: "\(i)", qos: .atLeastOnce) }
            let (acknowledged, error) = await publisher.publish(messages)
            #expect(acknowledged == 300 && error == nil, "\(acknowledged) acknowledged, \(String(describing: error))")
            let got = await inbox.wait { $0.count >= 300 }
            #expect(got.compactMap(\.text) == (0..<300).map { "\($0)" }, "in publishing order")
            // After the client is closed the batch fails at once, naming the reason.
            await publisher.disconnect()
            let (none, closed) = await publisher.publish([MQTTMessage(topic: "batch/x", text: "late", qos: .atLeastOnce)])
            #expect(none == 0 && closed != nil)
            await subscriber.disconnect()
        }
    }

    @Test func aBatchAwaitedWholeStopsWhereItsAcknowledgementsStop() async throws {
        try await withBroker { broker in
            let publisher = try await MQTTClient.connect(configuration(broker, "batch-stop"))
            let (first, firstError) = await publisher.publish((0..<5).map { MQTTMessage(topic: "stop/\($0)", text: "a", qos: .atLeastOnce) })
            #expect(first == 5 && firstError == nil)
            // A blackholed broker: nothing is acknowledged. QoS 0 counts as
            // sent once handed over, so the batch stops at the first QoS 1.
            broker.freeze()
            let waiting = Task {
                await publisher.publish([MQTTMessage(topic: "stop/q0", text: "b"),
                                         MQTTMessage(topic: "stop/m1", text: "c", qos: .atLeastOnce),
                                         MQTTMessage(topic: "stop/m2", text: "d", qos: .atLeastOnce)])
            }
            try await Task.sleep(for: .milliseconds(200))
            waiting.cancel()
            let (acknowledged, error) = await waiting.value
            broker.thaw()
            #expect(acknowledged == 1)
            #expect(error == .cancelled(endpoint: publisher.core.endpoint, operation: "PUBACK for stop/m1"), "\(String(describing: error))")
            // The client goes on; the cancelled batch's late acknowledgements
            // are dropped when they come (before this one's), not kept.
            let (after, afterError) = await publisher.publish([MQTTMessage(topic: "stop/after", text: "e", qos: .atLeastOnce)])
            #expect(after == 1 && afterError == nil)
            let leftOver = publisher.core.state.withLock { s in
                s.batches.count + s.batchOf.count + s.earlyAcks.count + s.unawaited.count + s.ackWaiters.count
            }
            #expect(leftOver == 0)
            await publisher.disconnect()
        }
    }

    /// A whole outbox batch (64) goes out before the first acknowledgement
    /// is needed: with libmosquitto's default of 20 in flight, the other 44
    /// left one by one, each after a PUBACK (docs/PERFORMANCE.md, twentieth
    /// pass). A broker that never acknowledges sees exactly the limit, and
    /// nothing more until it answers.
    @Test func aBatchOfSixtyFourIsInFlightAtOnce() async throws {
        let broker = try UnacknowledgingBroker()
        defer { broker.close() }
        let client = try await MQTTClient.connect(MQTTConfiguration(host: "127.0.0.1", port: broker.port, clientID: "window",
                                                                    keepAlive: 60, connectTimeout: .seconds(10)))
        let sending = Task {
            await client.publish((0..<100).map { MQTTMessage(topic: "w/\($0)", text: "x", qos: .atLeastOnce) })
        }
        let seen = await broker.publishes(atLeast: Int(MQTTClient.inFlightLimit), within: .seconds(10))
        // Room for more, had the client sent more.
        try await Task.sleep(for: .milliseconds(300))
        #expect(seen == 64 && broker.publishCount == 64, "\(broker.publishCount) PUBLISH packets before any PUBACK")
        sending.cancel()
        _ = await sending.value
        await client.disconnect()
    }

    @Test func retainedMessageReachesLateSubscriberWithRetainFlag() async throws {
        try await withBroker { broker in
            let publisher = try await MQTTClient.connect(configuration(broker, "pub"))
            // publish returns on PUBACK, so the broker has stored it.
            try await publisher.publish(MQTTMessage(topic: "gw/status", text: "online", qos: .atLeastOnce, retain: true))
            try await publisher.publish(MQTTMessage(topic: "gw/transient", text: "gone", qos: .atLeastOnce, retain: false))

            let late = try await MQTTClient.connect(configuration(broker, "late"))
            let inbox = Inbox(try await late.subscribe("gw/#", qos: .atLeastOnce))
            try await publisher.publish(MQTTMessage(topic: "gw/live", text: "now", qos: .atLeastOnce, retain: true))
            let got = await inbox.wait { $0.count >= 2 }

            #expect(got.first == MQTTMessage(topic: "gw/status", text: "online", qos: .atLeastOnce, retain: true))
            // A message published with retain to a live subscription arrives as a
            // normal message; the non-retained one from before was not kept.
            #expect(got.dropFirst().first == MQTTMessage(topic: "gw/live", text: "now", qos: .atLeastOnce, retain: false))
            #expect(!got.contains { $0.topic == "gw/transient" })

            await publisher.disconnect()
            await late.disconnect()
        }
    }

    @Test func willIsPublishedWhenTheConnectionDiesButNotAfterCleanDisconnect() async throws {
        try await withBroker { broker in
            let watcher = try await MQTTClient.connect(configuration(broker, "watcher"))
            let inbox = Inbox(try await watcher.subscribe("will/#", qos: .atLeastOnce))

            let crashing = try await MQTTClient.connect(configuration(broker, "crashing") {
                $0.will = MQTTMessage(topic: "will/crashing", text: "offline", qos: .atLeastOnce, retain: false)
            })
            crashing.abortWithoutDisconnect()
            let afterCrash = await inbox.wait { $0.contains { $0.topic == "will/crashing" } }
            #expect(afterCrash.first { $0.topic == "will/crashing" }?.text == "offline")
            await crashing.disconnect()

            let polite = try await MQTTClient.connect(configuration(broker, "polite") {
                $0.will = MQTTMessage(topic: "will/polite", text: "offline", qos: .atLeastOnce, retain: false)
            })
            await polite.disconnect()
            // A marker published after the broker had time to act on the close:
            // once it arrived, a will would have arrived before it.
            try await Task.sleep(for: .milliseconds(500))
            try await watcher.publish(MQTTMessage(topic: "will/marker", text: "", qos: .atLeastOnce))
            let afterClean = await inbox.wait { $0.contains { $0.topic == "will/marker" } }
            #expect(afterClean.contains { $0.topic == "will/marker" })
            #expect(!afterClean.contains { $0.topic == "will/polite" })

            await watcher.disconnect()
        }
    }

    @Test func reconnectsAfterBrokerRestartAndResubscribes() async throws {
        try await withBroker { broker in
            let subscriber = try await MQTTClient.connect(configuration(broker, "subscriber"))
            let publisher = try await MQTTClient.connect(configuration(broker, "publisher"))
            let states = Inbox(subscriber.states())
            let publisherStates = Inbox(publisher.states())
            let inbox = Inbox(try await subscriber.subscribe("r/#", qos: .atLeastOnce))
            #expect(await states.wait { $0 == [.connected] } == [.connected])

            try await broker.pause()
            let down = await states.wait { $0.count >= 2 }
            guard case let .disconnected(reason)? = down.last else {
                Issue.record("expected .disconnected after the broker stopped, got \(down)")
                return
            }
            #expect(reason.contains("127.0.0.1:\(broker.port)"), "\(reason)")

            // persistence false: the restarted broker has forgotten every
            // subscription, so delivery below needs the client's re-subscribe.
            try await broker.resume()
            let up = await states.wait(until: reconnected)
            #expect(up.last == .connected, "\(up)")
            await publisherStates.wait(until: reconnected)
            // The re-SUBSCRIBE is sent from on_connect, but the broker may take
            // the publisher's message first on a busy machine: publish until one
            // arrives (with no re-subscribe none ever would).
            var got: [MQTTMessage] = []
            for attempt in 1...20 where got.isEmpty {
                try await publisher.publish(MQTTMessage(topic: "r/after", text: "back \(attempt)", qos: .atLeastOnce))
                got = await inbox.wait(timeout: .seconds(1)) { !$0.isEmpty }
            }
            #expect(!got.isEmpty && got.allSatisfy { $0.topic == "r/after" }, "\(got.map(\.topic))")
            #expect(got.first?.text?.hasPrefix("back ") == true)

            await publisher.disconnect()
            await subscriber.disconnect()
        }
    }

    /// Idle past the 5 s keep-alive: the network thread must send PINGREQ by
    /// itself (the broker logs each one), and the connection stays as it was.
    @Test func anIdleConnectionIsKeptAliveWithPings() async throws {
        try await withBroker { broker in
            let idle = try await MQTTClient.connect(configuration(broker, "idle"))
            let publisher = try await MQTTClient.connect(configuration(broker, "idle-pub"))
            let states = Inbox(idle.states())
            let inbox = Inbox(try await idle.subscribe("idle/#", qos: .atLeastOnce))
            var waited = 0
            while !broker.log.contains("Received PINGREQ from idle\n") && waited < 80 {
                try await Task.sleep(for: .milliseconds(100))
                waited += 1
            }
            #expect(broker.log.contains("Received PINGREQ from idle\n"), "no PINGREQ from the idle client in 8 s")
            #expect(broker.log.contains("Sending PINGRESP to idle\n"))
            try await publisher.publish(MQTTMessage(topic: "idle/after", text: "still here", qos: .atLeastOnce))
            let got = await inbox.wait { !$0.isEmpty }
            #expect(got.map(\.topic) == ["idle/after"])
            #expect(await states.wait(timeout: .milliseconds(200)) { _ in false } == [.connected])
            await publisher.disconnect()
            await idle.disconnect()
        }
    }

    @Test func badCredentialsAreRefusedWithTheBrokersReasonAndEndpoint() async throws {
        try await withBroker(users: ["gateway": "s3cret"]) { broker in
            do throws(MQTTError) {
                let client = try await MQTTClient.connect(configuration(broker, "intruder") {
                    $0.username = "gateway"
                    $0.password = "wrong"
                })
                await client.disconnect()
                Issue.record("connect with a wrong password succeeded")
            } catch {
                guard case .refused = error else { Issue.record("expected .refused, got \(error)"); return }
                #expect(error.description.contains("not authorised"), "\(error)")
                #expect(error.description.contains("127.0.0.1:\(broker.port)"), "\(error)")
            }
            // The same broker accepts the right password: the refusal was about credentials.
            let client = try await MQTTClient.connect(configuration(broker, "gateway") {
                $0.username = "gateway"
                $0.password = "s3cret"
            })
            try await client.publish(MQTTMessage(topic: "auth/ok", text: "1", qos: .atLeastOnce))
            await client.disconnect()
        }
    }

    @Test func connectingToAClosedPortFailsNamingHostAndPort() async throws {
        let port = try freeLoopbackPort()  // nothing listens there once the probe socket closed
        do throws(MQTTError) {
            let client = try await MQTTClient.connect(MQTTConfiguration(host: "127.0.0.1", port: port, clientID: "nobody"))
            await client.disconnect()
            Issue.record("connect to a closed port succeeded")
        } catch {
            guard case .connectionFailed = error else { Issue.record("expected .connectionFailed, got \(error)"); return }
            #expect(error.description.contains("127.0.0.1:\(port)"), "\(error)")
        }
    }

    /// A host that drops packets (here: a listener whose accept queue is
    /// full, so the kernel drops further SYNs) would hold `connect` for the
    /// kernel's SYN retries, about two minutes; it gives up after
    /// `connectTimeout` instead, and at once when its task is cancelled (a
    /// gateway stopping while the broker is unreachable).
    @Test func aHostThatNeverAnswersTimesOutAndCancellingStopsTheWait() async throws {
        let listener = try SilentListener()
        defer { listener.close() }
        let clock = ContinuousClock()

        let started = clock.now
        do throws(MQTTError) {
            let client = try await MQTTClient.connect(MQTTConfiguration(host: "127.0.0.1", port: listener.port, clientID: "patient",
                                                                        connectTimeout: .seconds(1)))
            await client.disconnect()
            Issue.record("connect to a silent host succeeded")
        } catch {
            guard case .timedOut = error else { Issue.record("expected .timedOut, got \(error)"); return }
            #expect(error.description.contains("127.0.0.1:\(listener.port)"), "\(error)")
        }
        #expect(clock.now - started < .seconds(20), "\(clock.now - started)")

        let waiting = Task { () async -> MQTTError? in
            do throws(MQTTError) {
                let client = try await MQTTClient.connect(MQTTConfiguration(host: "127.0.0.1", port: listener.port, clientID: "cancelled",
                                                                            connectTimeout: .seconds(600)))
                await client.disconnect()
                return nil
            } catch {
                return error
            }
        }
        try await Task.sleep(for: .milliseconds(300))
        let cancelledAt = clock.now
        waiting.cancel()
        let error = await waiting.value
        guard case .cancelled? = error else { Issue.record("expected .cancelled, got \(String(describing: error))"); return }
        #expect(clock.now - cancelledAt < .seconds(20), "\(clock.now - cancelledAt)")
    }

    /// Cancelling publishers while their acknowledgements arrive: the
    /// network thread waking a waiter and the cancellation handler taking the
    /// client's lock once deadlocked (a gateway's shutdown hung). Hundreds of
    /// cancellations at every stage of a QoS 1 round trip, inside a task
    /// group as the gateway's are; then the client still works.
    @Test func cancellingWaitingPublishersNeverDeadlocks() async throws {
        try await withBroker { broker in
            let client = try await MQTTClient.connect(configuration(broker, "cancelled-publishers"))
            let inbox = Inbox(try await client.subscribe("c/#", qos: .atLeastOnce))
            for round in 0..<200 {
                await withTaskGroup(of: Void.self) { group in
                    for i in 0..<4 {
                        group.addTask {
                            try? await client.publish(MQTTMessage(topic: "c/\(round)/\(i)", text: "x", qos: .atLeastOnce))
                        }
                    }
                    // Cancel at a different moment each round: before, during and after the PUBACKs.
                    if round % 4 != 0 { try? await Task.sleep(for: .microseconds(50 * (round % 20))) }
                    group.cancelAll()
                }
            }
            try await client.publish(MQTTMessage(topic: "c/last", text: "still here", qos: .atLeastOnce))
            let seen = await inbox.wait(timeout: .seconds(30)) { $0.contains { $0.topic == "c/last" } }
            #expect(seen.contains { $0.topic == "c/last" })
            await client.disconnect()
        }
    }

    @Test func mqtt5ConnectionPublishesAndSubscribes() async throws {
        try await withBroker { broker in
            let v5 = try await MQTTClient.connect(configuration(broker, "five") { $0.protocolVersion = .v5 })
            let inbox = Inbox(try await v5.subscribe("v5/+", qos: .exactlyOnce))
            try await v5.publish(MQTTMessage(topic: "v5/hello", text: "five", qos: .exactlyOnce))
            let got = await inbox.wait { !$0.isEmpty }
            #expect(got == [MQTTMessage(topic: "v5/hello", text: "five", qos: .exactlyOnce, retain: false)])
            // The broker log confirms the protocol actually spoken ("p5";
            // v3.1.1 clients are logged as "p2").
            #expect(broker.log.contains("as five (p5,"), "\(broker.log)")
            await v5.disconnect()
        }
    }
}

/// A TCP socket listening on 127.0.0.1, on a port the kernel chose; its address.
func loopbackListener(backlog: Int32, for what: String) throws -> (fd: Int32, address: sockaddr_in) {
    let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = listener >= 0 && withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { p -> Bool in
            bind(listener, p, length) == 0 && listen(listener, backlog) == 0 && getsockname(listener, p, &length) == 0
        }
    }
    guard bound else {
        let reason = String(cString: strerror(errno))
        if listener >= 0 { _ = Glibc.close(listener) }
        throw BrokerError(description: "\(what): \(reason)")
    }
    return (listener, address)
}

/// A TCP listener on 127.0.0.1 that never accepts, with its one-connection
/// accept queue already filled: the kernel drops every further SYN, so a
/// client's connect hangs as it would towards a host behind a dropping
/// firewall.
final class SilentListener: @unchecked Sendable {
    let port: Int
    private let listener: Int32
    private let filler: Int32

    init() throws {
        let (listener, address) = try loopbackListener(backlog: 0, for: "silent listener")
        let filler = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        let connected = withUnsafePointer(to: address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(filler, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        guard filler >= 0, connected else { throw BrokerError(description: "silent listener filler: \(String(cString: strerror(errno)))") }
        self.listener = listener
        self.filler = filler
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    func close() {
        _ = Glibc.close(filler)
        _ = Glibc.close(listener)
    }
}

/// A one-client MQTT 3.1.1 "broker" on 127.0.0.1 that accepts the
/// connection, answers CONNECT with CONNACK (accepted) and then only counts
/// the PUBLISH packets that arrive, acknowledging none: how many a client
/// sends before it waits for acknowledgements is its in-flight window.
final class UnacknowledgingBroker: @unchecked Sendable {
    let port: Int
    private let listener: Int32
    private let count = Lock<(publishes: Int, closed: Bool)>((0, false))

    var publishCount: Int { count.withLock { $0.publishes } }

    init() throws {
        let (listener, address) = try loopbackListener(backlog: 1, for: "unacknowledging broker")
        self.listener = listener
        port = Int(UInt16(bigEndian: address.sin_port))
        Thread.detachNewThread { [self] in serve() }
    }

    /// Waits until `wanted` PUBLISH packets arrived or `limit` passed; returns how many arrived.
    func publishes(atLeast wanted: Int, within limit: Duration) async -> Int {
        let end = ContinuousClock.now + limit
        while ContinuousClock.now < end, publishCount < wanted {
            try? await Task.sleep(for: .milliseconds(20))
        }
        return publishCount
    }

    func close() {
        count.withLock { $0.closed = true }
        shutdown(listener, Int32(SHUT_RDWR))
        _ = Glibc.close(listener)
    }

    private func serve() {
        let fd = accept(listener, nil, nil)
        guard fd >= 0 else { return }
        defer { _ = Glibc.close(fd) }
        var timeout = timeval(tv_sec: 0, tv_usec: 100_000)
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while !count.withLock({ $0.closed }) {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 { return }
            if n < 0 { if errno == EAGAIN || errno == EINTR { continue } else { return } }
            buffer.append(contentsOf: chunk[0..<n])
            // Whole packets: a type byte, the remaining length (7 bits a byte), the rest.
            while buffer.count >= 2 {
                var length = 0, shift = 0, index = 1
                var complete = false
                while index < buffer.count, index <= 4 {
                    length |= Int(buffer[index] & 0x7F) << shift
                    shift += 7
                    index += 1
                    if buffer[index - 1] & 0x80 == 0 { complete = true; break }
                }
                guard complete, buffer.count >= index + length else { break }
                switch buffer[0] >> 4 {
                case 1: _ = [UInt8]([0x20, 0x02, 0x00, 0x00]).withUnsafeBytes { send(fd, $0.baseAddress, 4, Int32(MSG_NOSIGNAL)) }
                case 3: count.withLock { $0.publishes += 1 }
                default: break
                }
                buffer.removeFirst(index + length)
            }
        }
    }
}
