import BLEParsing
import Locking

/// The device profiles in force (docs/PROFILES.md), shared by the
/// repositories that decode advertisements and the front end that loads
/// them: a configuration reload replaces the set, and the next
/// advertisement of each device is decoded by the new one (cached readings
/// are keyed by the set's generation).
public final class ProfileSource: Sendable {
    private let state: Lock<(generation: UInt64, profiles: ProfileSet)>

    public init(_ profiles: ProfileSet = ProfileSet()) {
        state = Lock((0, profiles))
    }

    public var current: (generation: UInt64, profiles: ProfileSet) { state.withLock { $0 } }

    public var profiles: ProfileSet { state.withLock { $0.profiles } }

    /// Puts `profiles` in force; returns the new generation.
    @discardableResult
    public func replace(with profiles: ProfileSet) -> UInt64 {
        state.withLock { s in
            s = (s.generation &+ 1, profiles)
            return s.generation
        }
    }
}
