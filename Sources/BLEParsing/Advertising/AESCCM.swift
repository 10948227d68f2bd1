import Vocabulary
internal import CLibCrypto
#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#elseif canImport(Darwin)
internal import Darwin
#endif

/// AES-128-CCM (NIST SP 800-38C / RFC 3610). Used by the encrypted
/// advertisement formats (BTHome, Xiaomi MiBeacon v4/v5, pvvx).
///
/// No AES is implemented here: the block cipher is the system libcrypto's
/// (OpenSSL EVP, AES-128-ECB: AES-NI where the CPU has it, otherwise
/// OpenSSL's constant-time vector-permutation code). Decryption does the CCM
/// mode itself (CTR keystream + CBC-MAC over AES-ECB blocks, then a
/// constant-time tag comparison) because OpenSSL's CCM cipher costs more in
/// per-message set-up (parameter lookups, context re-initialisation) than
/// the decryption of an advertisement. Encryption (tests and tools) uses
/// OpenSSL's CCM cipher, so the two implementations check each other.
public enum AESCCM {
    /// Why an AES-CCM operation failed.
    public enum Failure: Error, Equatable, Sendable {
        /// Key is not 16 bytes.
        case badKeyLength(Int)
        /// Nonce length outside 7...13 bytes.
        case badNonceLength(Int)
        /// Tag length not one of 4, 6, 8, 10, 12, 14, 16.
        case badTagLength(Int)
        /// Authentication failed: wrong key, nonce, AAD or tampered data.
        case authenticationFailed
        /// libcrypto refused an operation (context allocation, init).
        case library(String)
    }

    /// A libcrypto cipher implementation, fetched from the default provider
    /// once. (`EVP_aes_128_ccm()` and friends make every init do an implicit
    /// provider fetch.) An `EVP_CIPHER` is immutable and reference counted
    /// once fetched, so sharing it between threads is safe; contexts are not shared.
    struct Cipher: @unchecked Sendable {
        let pointer: OpaquePointer?
    }

    static let fetchedCCM = Cipher(pointer: EVP_CIPHER_fetch(nil, "AES-128-CCM", nil))
    static let fetchedECB = Cipher(pointer: EVP_CIPHER_fetch(nil, "AES-128-ECB", nil))

    @inline(__always)
    static var ccmCipher: OpaquePointer? { fetchedCCM.pointer ?? EVP_aes_128_ccm() }
    @inline(__always)
    static var ecbCipher: OpaquePointer? { fetchedECB.pointer ?? EVP_aes_128_ecb() }

    static func validate(keyLength: Int, nonceLength: Int, tagLength: Int) throws(Failure) {
        guard keyLength == 16 else { throw .badKeyLength(keyLength) }
        guard (7...13).contains(nonceLength) else { throw .badNonceLength(nonceLength) }
        guard tagLength >= 4, tagLength <= 16, tagLength % 2 == 0 else { throw .badTagLength(tagLength) }
    }

    /// Decrypts `ciphertext` and verifies `tag` (whose length is the MIC length).
    public static func decrypt(
        key: [UInt8], nonce: [UInt8], ciphertext: [UInt8], tag: [UInt8], aad: [UInt8] = []
    ) throws(Failure) -> [UInt8] {
        var n = Nonce()
        guard nonce.count <= 13 else { throw validationFailure(key.count, nonce.count, tag.count) }
        for b in nonce { n.append(b) }
        return try decrypt(key: key, nonce: n, ciphertext: ciphertext[...], tag: tag[...], aad: aad[...])
    }

    /// The first validation error for these lengths (called once `validate` is known to fail).
    static func validationFailure(_ key: Int, _ nonce: Int, _ tag: Int) -> Failure {
        do { try validate(keyLength: key, nonceLength: nonce, tagLength: tag) } catch { return error }
        return .badNonceLength(nonce)
    }

    /// A nonce of up to 13 bytes, built in place (no array).
    struct Nonce {
        var storage: (UInt64, UInt64) = (0, 0)
        private(set) var count = 0

        @inline(__always)
        mutating func append(_ byte: UInt8) {
            guard count < 16 else { return }  // callers append at most 13 bytes
            withUnsafeMutableBytes(of: &storage) { $0[count] = byte }
            count += 1
        }

        /// Appends the 6 address bytes, display order or air order (reversed).
        @inline(__always)
        mutating func appendAddress(_ address: BluetoothAddress, airOrder: Bool) {
            let v = address.value
            for k in 0..<6 {
                let shift = UInt64(airOrder ? 8 * k : 40 - 8 * k)
                append(UInt8(truncatingIfNeeded: v >> shift))
            }
        }

        func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws(Failure) -> R) throws(Failure) -> R {
            var copy = storage
            return try withUnsafeBytes(of: &copy) { (p) throws(Failure) -> R in
                try body(UnsafeRawBufferPointer(rebasing: p[0..<count]))
            }
        }
    }

    /// ``decrypt(key:nonce:ciphertext:tag:aad:)`` without intermediate arrays.
    static func decrypt(
        key: [UInt8], nonce: Nonce, ciphertext: ArraySlice<UInt8>, tag: ArraySlice<UInt8>, aad: ArraySlice<UInt8>
    ) throws(Failure) -> [UInt8] {
        try validate(keyLength: key.count, nonceLength: nonce.count, tagLength: tag.count)
        let L = 15 - nonce.count  // bytes of the message length field, 2...8
        if L < 8, ciphertext.count >> (8 * L) != 0 { throw .library("set length") }
        guard let ctx = BlockCipherCache.context(for: key) else { throw .library("AES-128-ECB key set-up") }

        // Blocks are processed in place in one scratch buffer:
        // [A0 A1 ... An] counter blocks (encrypted in one call to S0 S1 ... Sn), then one
        // MAC block and the formatted AAD (length prefix + AAD, zero padded).
        let messageBlocks = (ciphertext.count + 15) / 16
        let aadHeader = aad.isEmpty ? 0 : (aad.count < 0xFF00 ? 2 : 6)
        let aadBlocks = (aadHeader + aad.count + 15) / 16
        let counterBytes = 16 * (1 + messageBlocks)
        let scratchBytes = counterBytes + 16 + 16 * max(aadBlocks, messageBlocks)
        var authentic = false
        let plain = try withUnsafeTemporaryAllocation(byteCount: scratchBytes, alignment: 16) {
            (scratch) throws(Failure) -> [UInt8] in
            _ = scratch.initializeMemory(as: UInt8.self, repeating: 0)
            let s = scratch.baseAddress!  // non-empty allocation
            // Counter blocks A_i: flags (L - 1), nonce, counter i (big-endian, L bytes).
            try nonce.withBytes { (n) throws(Failure) in
                for i in 0...messageBlocks {
                    let a = s + 16 * i
                    a.storeBytes(of: UInt8(L - 1), as: UInt8.self)
                    (a + 1).copyMemory(from: n.baseAddress!, byteCount: n.count)
                    var counter = i
                    var j = 15
                    while counter != 0 { a.storeBytes(of: UInt8(truncatingIfNeeded: counter), toByteOffset: j, as: UInt8.self); counter >>= 8; j -= 1 }
                }
            }
            try ecb(ctx, s, s, counterBytes)
            // Plaintext = ciphertext XOR S1..Sn, in place over the keystream.
            let text = s + 16
            ciphertext.withUnsafeBufferPointer { c in
                for k in 0..<c.count {
                    text.storeBytes(of: c[k] ^ text.load(fromByteOffset: k, as: UInt8.self), toByteOffset: k, as: UInt8.self)
                }
            }
            // CBC-MAC: B0 (flags, nonce, message length), AAD blocks, message blocks.
            let mac = s + counterBytes
            let data = mac + 16
            let flags = (aad.isEmpty ? 0 : 0x40) | ((tag.count - 2) / 2) << 3 | (L - 1)
            mac.storeBytes(of: UInt8(flags), as: UInt8.self)
            try nonce.withBytes { (n) throws(Failure) in (mac + 1).copyMemory(from: n.baseAddress!, byteCount: n.count) }
            var length = ciphertext.count
            for j in stride(from: 15, to: 15 - L, by: -1) {
                mac.storeBytes(of: UInt8(truncatingIfNeeded: length), toByteOffset: j, as: UInt8.self)
                length >>= 8
            }
            try ecb(ctx, mac, mac, 16)
            if !aad.isEmpty {
                let la = aad.count
                if aadHeader == 2 {
                    data.storeBytes(of: UInt8(la >> 8), as: UInt8.self)
                    data.storeBytes(of: UInt8(truncatingIfNeeded: la), toByteOffset: 1, as: UInt8.self)
                } else {
                    let header: [UInt8] = [0xFF, 0xFE, UInt8(truncatingIfNeeded: la >> 24), UInt8(truncatingIfNeeded: la >> 16),
                                           UInt8(truncatingIfNeeded: la >> 8), UInt8(truncatingIfNeeded: la)]
                    for (k, b) in header.enumerated() { data.storeBytes(of: b, toByteOffset: k, as: UInt8.self) }
                }
                aad.withUnsafeBytes { (data + aadHeader).copyMemory(from: $0.baseAddress!, byteCount: la) }
                try chain(ctx, mac, data, aadBlocks)
            }
            if messageBlocks > 0 {
                data.initializeMemory(as: UInt8.self, repeating: 0, count: 16 * messageBlocks)
                data.copyMemory(from: text, byteCount: ciphertext.count)
                try chain(ctx, mac, data, messageBlocks)
            }
            // Tag check in constant time: T XOR S0 against the received tag.
            var diff: UInt8 = 0
            tag.withUnsafeBufferPointer { t in
                for k in 0..<t.count {
                    diff |= t[k] ^ mac.load(fromByteOffset: k, as: UInt8.self) ^ s.load(fromByteOffset: k, as: UInt8.self)
                }
            }
            authentic = diff == 0
            let out = authentic ? Array(UnsafeBufferPointer(start: text.assumingMemoryBound(to: UInt8.self),
                                                            count: ciphertext.count)) : []
            _ = scratch.initializeMemory(as: UInt8.self, repeating: 0)  // plaintext, keystream and MAC state
            return out
        }
        guard authentic else { throw .authenticationFailed }
        return plain
    }

    /// Encrypts `count` bytes (whole blocks) from `input` to `output` with AES-128-ECB.
    @inline(__always)
    static func ecb(_ ctx: OpaquePointer, _ output: UnsafeMutableRawPointer, _ input: UnsafeRawPointer, _ count: Int)
        throws(Failure)
    {
        var outLen: Int32 = 0
        let rc = EVP_EncryptUpdate(ctx, output.assumingMemoryBound(to: UInt8.self), &outLen,
                                   input.assumingMemoryBound(to: UInt8.self), Int32(count))
        guard rc == 1, outLen == Int32(count) else {
            BlockCipherCache.forgetKey()
            throw .library("AES-128-ECB")
        }
    }

    /// CBC-MAC step over `blocks` blocks at `data`: mac = E(mac XOR block) for each block.
    static func chain(_ ctx: OpaquePointer, _ mac: UnsafeMutableRawPointer, _ data: UnsafeRawPointer, _ blocks: Int)
        throws(Failure)
    {
        for b in 0..<blocks {
            for k in 0..<2 {
                let x = mac.load(fromByteOffset: 8 * k, as: UInt64.self) ^ data.loadUnaligned(fromByteOffset: 16 * b + 8 * k, as: UInt64.self)
                mac.storeBytes(of: x, toByteOffset: 8 * k, as: UInt64.self)
            }
            try ecb(ctx, mac, mac, 16)
        }
    }

    /// Encrypts `plaintext`, returning ciphertext and a `tagLength`-byte tag.
    /// (Used by tests and by tools that build encrypted test advertisements.)
    public static func encrypt(
        key: [UInt8], nonce: [UInt8], plaintext: [UInt8], aad: [UInt8] = [], tagLength: Int
    ) throws(Failure) -> (ciphertext: [UInt8], tag: [UInt8]) {
        try validate(keyLength: key.count, nonceLength: nonce.count, tagLength: tagLength)
        guard let ctx = EVP_CIPHER_CTX_new() else { throw .library("EVP_CIPHER_CTX_new") }
        defer { EVP_CIPHER_CTX_free(ctx) }
        var outLen: Int32 = 0
        var out = [UInt8](repeating: 0, count: max(plaintext.count, 1) + 16)
        let pt = plaintext.isEmpty ? [0] : plaintext
        guard EVP_EncryptInit_ex(ctx, ccmCipher, nil, nil, nil) == 1 else { throw .library("init") }
        guard EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_IVLEN, Int32(nonce.count), nil) == 1 else {
            throw .library("set nonce length")
        }
        guard EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, Int32(tagLength), nil) == 1 else {
            throw .library("set tag length")
        }
        guard EVP_EncryptInit_ex(ctx, nil, nil, key, nonce) == 1 else { throw .library("set key") }
        guard EVP_EncryptUpdate(ctx, nil, &outLen, nil, Int32(plaintext.count)) == 1 else {
            throw .library("set length")
        }
        if !aad.isEmpty {
            guard EVP_EncryptUpdate(ctx, nil, &outLen, aad, Int32(aad.count)) == 1 else { throw .library("aad") }
        }
        let rc = out.withUnsafeMutableBufferPointer { o in
            EVP_EncryptUpdate(ctx, o.baseAddress, &outLen, pt, Int32(plaintext.count))
        }
        guard rc == 1 else { throw .library("encrypt") }
        var finalLen: Int32 = 0
        let rcFinal = out.withUnsafeMutableBufferPointer { o in
            EVP_EncryptFinal_ex(ctx, o.baseAddress.map { $0 + Int(outLen) }, &finalLen)
        }
        guard rcFinal == 1 else { throw .library("final") }
        var tag = [UInt8](repeating: 0, count: tagLength)
        let rcTag = tag.withUnsafeMutableBytes { p in
            EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, Int32(tagLength), p.baseAddress)
        }
        guard rcTag == 1 else { throw .library("get tag") }
        return (Array(out.prefix(plaintext.count)), tag)
    }
}

/// One AES-128-ECB context per thread, with the key it was last set up
/// with, so that consecutive decryptions with the same bindkey (the usual
/// case: one device advertising repeatedly) skip the key set-up, and no
/// decryption allocates an OpenSSL context. Contexts are never shared
/// between threads; a thread's context is freed when the thread exits.
enum BlockCipherCache {
    struct Entry {
        var ctx: OpaquePointer
        var key: (UInt64, UInt64) = (0, 0)
        var hasKey = false
    }

    struct Slot: @unchecked Sendable {
        let key: pthread_key_t
        let valid: Bool
    }

    static let slot: Slot = {
        var key = pthread_key_t()
        let rc = pthread_key_create(&key) { p in
            let raw: UnsafeMutableRawPointer? = p
            guard let raw else { return }
            let entry = raw.assumingMemoryBound(to: Entry.self)
            EVP_CIPHER_CTX_free(entry.pointee.ctx)
            entry.deinitialize(count: 1)
            entry.deallocate()
        }
        return Slot(key: key, valid: rc == 0)
    }()

    /// This thread's entry, created on first use (nil if the slot or OpenSSL failed).
    static func entry() -> UnsafeMutablePointer<Entry>? {
        let s = slot
        guard s.valid else { return nil }
        if let p = pthread_getspecific(s.key) { return p.assumingMemoryBound(to: Entry.self) }
        guard let ctx = EVP_CIPHER_CTX_new() else { return nil }
        guard EVP_EncryptInit_ex(ctx, AESCCM.ecbCipher, nil, nil, nil) == 1 else {
            EVP_CIPHER_CTX_free(ctx)
            return nil
        }
        EVP_CIPHER_CTX_set_padding(ctx, 0)
        let entry = UnsafeMutablePointer<Entry>.allocate(capacity: 1)
        entry.initialize(to: Entry(ctx: ctx))
        guard pthread_setspecific(s.key, entry) == 0 else {
            EVP_CIPHER_CTX_free(ctx)
            entry.deinitialize(count: 1)
            entry.deallocate()
            return nil
        }
        return entry
    }

    /// This thread's context, set up for the 16-byte `key`.
    static func context(for key: [UInt8]) -> OpaquePointer? {
        guard key.count == 16, let entry = entry() else { return nil }
        let k = key.withUnsafeBytes { ($0.loadUnaligned(as: UInt64.self), $0.loadUnaligned(fromByteOffset: 8, as: UInt64.self)) }
        if entry.pointee.hasKey, entry.pointee.key == k { return entry.pointee.ctx }
        entry.pointee.hasKey = false
        let rc = key.withUnsafeBufferPointer { EVP_EncryptInit_ex(entry.pointee.ctx, nil, nil, $0.baseAddress, nil) }
        guard rc == 1 else { return nil }
        entry.pointee.key = k
        entry.pointee.hasKey = true
        return entry.pointee.ctx
    }

    /// Makes the next call set the key up again (after an OpenSSL failure).
    static func forgetKey() {
        let s = slot
        guard s.valid, let p = pthread_getspecific(s.key) else { return }
        p.assumingMemoryBound(to: Entry.self).pointee.hasKey = false
    }
}
