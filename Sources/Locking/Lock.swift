#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A value guarded by a POSIX mutex: the lock every target uses instead of
/// `Synchronization.Mutex`.
///
/// Why not `Mutex`: with Swift 6.3 on Linux, a thread that has to wait for a
/// `Mutex` takes it in the standard library's futex slow path, which
/// ThreadSanitizer does not see, so it reports the data the lock guards as
/// racing (docs/RELIABILITY.md, "Sanitizers"). ThreadSanitizer intercepts
/// `pthread_mutex_lock`, so with this lock a race it reports is a race.
/// The cost: one allocation when the lock is made (the mutex must not move)
/// and a call into libc per acquisition instead of an inlined atomic, a few
/// nanoseconds; no lock is made per advertisement.
///
/// Copies share one lock and one value (a reference), so a `Lock` may be
/// stored in structs as well as classes.
public struct Lock<Value>: @unchecked Sendable {
    @usableFromInline
    let storage: LockStorage<Value>

    public init(_ initialValue: consuming sending Value) {
        storage = LockStorage<Value>.make(initialValue)
    }

    /// Runs `body` with the value while holding the lock.
    @inlinable
    public func withLock<Result, E: Error>(
        _ body: (inout sending Value) throws(E) -> sending Result
    ) throws(E) -> sending Result {
        let mutex = storage.withUnsafeMutablePointerToHeader { $0 }
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        // The value's address is taken under the lock: ThreadSanitizer
        // counts taking it as an access to the value.
        let value = storage.withUnsafeMutablePointerToElements { $0 }
        return try body(&value.pointee)
    }
}

/// The `pthread_mutex_t` (the buffer's header) and the value (its one
/// element) in one allocation. The mutex first: reaching it reads the
/// object's type, which must not look like an access to the value (with a
/// zero-sized value, `Lock<Void>`, the two addresses would meet).
@usableFromInline
final class LockStorage<Value>: ManagedBuffer<pthread_mutex_t, Value> {
    static func make(_ initialValue: consuming Value) -> LockStorage<Value> {
        let initialValue = initialValue
        let buffer = create(minimumCapacity: 1) { _ in pthread_mutex_t() }
        // `create` called on this class makes an instance of it.
        let storage = unsafeDowncast(buffer, to: LockStorage<Value>.self)
        storage.withUnsafeMutablePointers { mutex, value in
            // Default attributes: pthread_mutex_init cannot fail with them.
            _ = pthread_mutex_init(mutex, nil)
            value.initialize(to: initialValue)
        }
        return storage
    }

    deinit {
        withUnsafeMutablePointers { mutex, value in
            value.deinitialize(count: 1)
            _ = pthread_mutex_destroy(mutex)
        }
    }
}

/// A lock that guards state kept elsewhere (several fields of a class, a C
/// library's calls): the same mutex, without a value.
extension Lock where Value == Void {
    public init() { self.init(()) }

    @inlinable
    public func withLock<Result, E: Error>(_ body: () throws(E) -> Result) throws(E) -> Result {
        let mutex = storage.withUnsafeMutablePointerToHeader { $0 }
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }
}
