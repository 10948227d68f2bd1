/// Who owns the well-known names the connection follows (match rules with a
/// well-known sender, ``DBusConnection/nameOwners(of:)``): the bus routes
/// signals by unique name, so a rule for `org.bluez` matches only through
/// the current owner of `org.bluez`.
///
/// Owned by ``ConnectionCore`` and touched on its I/O thread only.
final class NameOwnerTracker {
    final class Track {
        /// The unique name that owns it; nil when nobody does.
        var owner: String?
        /// GetNameOwner (or a NameOwnerChanged) has answered.
        var known = false
        /// Rules and watchers following it; the bus rule goes with the last.
        var users = 0
        var watchers: [UInt64: AsyncBuffer<String?>] = [:]
        var readyWaiters: [(DBusError?) -> Void] = []

        /// The bus said who owns it (nil: nobody); watchers hear it.
        func learn(_ owner: String?) {
            self.owner = owner
            known = true
            for (_, w) in watchers { w.push(owner) }
        }
    }

    private(set) var tracks: [String: Track] = [:]

    /// The owner of a followed `name`, nil when not followed or not owned.
    func owner(of name: String) -> String? { tracks[name]?.owner }

    func track(_ name: String) -> Track? { tracks[name] }

    func begin(_ name: String) -> Track {
        let track = Track()
        tracks[name] = track
        return track
    }

    func end(_ name: String, _ track: Track) {
        if tracks[name] === track { tracks[name] = nil }
    }

    /// Applies the bus's NameOwnerChanged for `name` (an empty new owner
    /// means nobody); watchers hear it.
    func ownerChanged(_ name: String, to newOwner: String) {
        tracks[name]?.learn(newOwner.isEmpty ? nil : newOwner)
    }

    /// Ends every watcher with `error` and returns every waiting follower
    /// (the connection is gone).
    func removeAll(finishing error: DBusError) -> [(DBusError?) -> Void] {
        var waiters: [(DBusError?) -> Void] = []
        for (_, track) in tracks {
            for (_, w) in track.watchers { w.finish(throwing: error) }
            waiters += track.readyWaiters
            track.readyWaiters.removeAll()
        }
        tracks.removeAll()
        return waiters
    }

    static func rule(for name: String) -> String {
        DBusMatchRule(type: .signal, sender: "org.freedesktop.DBus", interface: "org.freedesktop.DBus",
                      member: "NameOwnerChanged", arguments: [0: name]).description
    }
}

// MARK: Following a name (the bus side)

extension ConnectionCore {
    /// Starts following the owner of a well-known name: AddMatch on its
    /// NameOwnerChanged first, then GetNameOwner, so no change is missed.
    func trackNameOnLoop(_ name: String, ready: @escaping (DBusError?) -> Void) {
        assertOnLoop()
        if let track = names.track(name) {
            track.users += 1
            if track.known { ready(nil) } else { track.readyWaiters.append(ready) }
            return
        }
        let track = names.begin(name)
        track.users = 1
        track.readyWaiters.append(ready)
        busCallOnLoop("AddMatch", [.string(NameOwnerTracker.rule(for: name))]) { [self] result in
            if case let .failure(error) = result {
                let waiters = track.readyWaiters
                track.readyWaiters.removeAll()
                names.end(name, track)
                for w in waiters { w(error) }
                return
            }
            busCallOnLoop("GetNameOwner", [.string(name)]) { result in
                // A NameOwnerChanged that came first is newer than this answer.
                if !track.known {
                    if case let .success(reply) = result, case let .string(owner)? = reply.body.first {
                        track.learn(owner)
                    } else {
                        track.learn(nil)
                    }
                }
                let waiters = track.readyWaiters
                track.readyWaiters.removeAll()
                for w in waiters { w(nil) }
            }
        }
    }

    func untrackNameOnLoop(_ name: String) {
        assertOnLoop()
        guard let track = names.track(name) else { return }
        track.users -= 1
        guard track.users <= 0 else { return }
        names.end(name, track)
        for (_, w) in track.watchers { w.finish() }
        if !dead {
            busCallOnLoop("RemoveMatch", [.string(NameOwnerTracker.rule(for: name))]) { _ in }
        }
    }

    func addOwnerWatcherOnLoop(_ name: String, id: UInt64, buffer: AsyncBuffer<String?>) {
        assertOnLoop()
        trackNameOnLoop(name) { [self] error in
            if let error {
                buffer.finish(throwing: error)
                return
            }
            guard let track = names.track(name) else {
                buffer.finish(throwing: DBusError.disconnected)
                return
            }
            track.watchers[id] = buffer
            buffer.push(track.owner)
        }
    }

    func removeOwnerWatcherOnLoop(_ name: String, id: UInt64) {
        assertOnLoop()
        guard let track = names.track(name), track.watchers.removeValue(forKey: id) != nil else { return }
        untrackNameOnLoop(name)
    }
}
