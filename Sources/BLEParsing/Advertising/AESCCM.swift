internal import CLibCrypto
#if canImport(Glibc)
internal import Glibc
#elseif canImport(Musl)
internal import Musl
#elseif canImport(Darwin)
internal import Darwin
#endif

/// AES-128-CCM (NIST SP 800-38C / RFC 3610) through the system libcrypto's
/// EVP interface. Used by the encrypted advertisement formats (BTHome,
/// Xiaomi MiBeacon v4/v5). No AES is implemented here.
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

    /// The AES-128-CCM implementation, fetched from the default provider once.
    /// (`EVP_aes_128_ccm()` makes every init do an implicit provider fetch,
    /// which costs more than the decryption of an advertisement.) An
    /// `EVP_CIPHER` is immutable and reference counted once fetched, so
    /// sharing it between threads is safe; contexts stay per call.
    struct Cipher: @unchecked Sendable {
        let pointer: OpaquePointer?
    }

    static let fetched = Cipher(pointer: EVP_CIPHER_fetch(nil, "AES-128-CCM", nil))

    @inline(__always)
    static var cipher: OpaquePointer? { fetched.pointer ?? EVP_aes_128_ccm() }

    static func validate(key: [UInt8], nonce: [UInt8], tagLength: Int) throws(Failure) {
        guard key.count == 16 else { throw .badKeyLength(key.count) }
        guard (7...13).contains(nonce.count) else { throw .badNonceLength(nonce.count) }
        guard tagLength >= 4, tagLength <= 16, tagLength % 2 == 0 else { throw .badTagLength(tagLength) }
    }

    /// Decrypts `ciphertext` and verifies `tag` (whose length is the MIC length).
    public static func decrypt(
        key: [UInt8], nonce: [UInt8], ciphertext: [UInt8], tag: [UInt8], aad: [UInt8] = []
    ) throws(Failure) -> [UInt8] {
        try validate(key: key, nonce: nonce, tagLength: tag.count)
        // A decryption context that this thread used before (cipher already set
        // up), or a new one. It goes back to the thread's cache only after a
        // successful decryption; after any failure it is freed.
        let cached = DecryptContextCache.take()
        guard let ctx = cached ?? EVP_CIPHER_CTX_new() else { throw .library("EVP_CIPHER_CTX_new") }
        var succeeded = false
        defer {
            if succeeded { DecryptContextCache.give(ctx) } else { EVP_CIPHER_CTX_free(ctx) }
        }
        var outLen: Int32 = 0
        var out = [UInt8](repeating: 0, count: max(ciphertext.count, 1))
        // Padding keeps every pointer non-nil even for empty inputs.
        let ct = ciphertext.isEmpty ? [0] : ciphertext
        let aadBuf = aad.isEmpty ? [0] : aad
        if cached == nil {
            guard EVP_DecryptInit_ex(ctx, cipher, nil, nil, nil) == 1 else { throw .library("init") }
        }
        guard EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_IVLEN, Int32(nonce.count), nil) == 1 else {
            throw .library("set nonce length")
        }
        // OpenSSL only reads (copies) the expected tag; no need for a mutable copy.
        let tagOK = tag.withUnsafeBytes { p in
            EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, Int32(tag.count), UnsafeMutableRawPointer(mutating: p.baseAddress))
        }
        guard tagOK == 1 else { throw .library("set tag") }
        guard EVP_DecryptInit_ex(ctx, nil, nil, key, nonce) == 1 else { throw .library("set key") }
        guard EVP_DecryptUpdate(ctx, nil, &outLen, nil, Int32(ciphertext.count)) == 1 else {
            throw .library("set length")
        }
        if !aad.isEmpty {
            guard EVP_DecryptUpdate(ctx, nil, &outLen, aadBuf, Int32(aad.count)) == 1 else {
                throw .library("aad")
            }
        }
        let rc = out.withUnsafeMutableBufferPointer { o in
            EVP_DecryptUpdate(ctx, o.baseAddress, &outLen, ct, Int32(ciphertext.count))
        }
        guard rc > 0 else { throw .authenticationFailed }
        succeeded = true
        if out.count != ciphertext.count { out.removeAll() }  // empty ciphertext: drop the padding byte
        return out
    }

    /// Encrypts `plaintext`, returning ciphertext and a `tagLength`-byte tag.
    /// (Used by tests and by tools that build encrypted test advertisements.)
    public static func encrypt(
        key: [UInt8], nonce: [UInt8], plaintext: [UInt8], aad: [UInt8] = [], tagLength: Int
    ) throws(Failure) -> (ciphertext: [UInt8], tag: [UInt8]) {
        try validate(key: key, nonce: nonce, tagLength: tagLength)
        guard let ctx = EVP_CIPHER_CTX_new() else { throw .library("EVP_CIPHER_CTX_new") }
        defer { EVP_CIPHER_CTX_free(ctx) }
        var outLen: Int32 = 0
        var out = [UInt8](repeating: 0, count: max(plaintext.count, 1) + 16)
        let pt = plaintext.isEmpty ? [0] : plaintext
        guard EVP_EncryptInit_ex(ctx, cipher, nil, nil, nil) == 1 else { throw .library("init") }
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

/// One AES-CCM decryption context per thread, kept between calls so that a
/// decryption does not allocate and set up a fresh OpenSSL context (and its
/// provider state) every time. Contexts are never shared between threads:
/// `take()` removes the context from the calling thread's slot and `give(_:)`
/// puts it back (or frees it); the thread's context is freed when it exits.
enum DecryptContextCache {
    struct Slot: @unchecked Sendable {
        let key: pthread_key_t
        let valid: Bool
    }

    static let slot: Slot = {
        var key = pthread_key_t()
        let rc = pthread_key_create(&key) { p in
            let raw: UnsafeMutableRawPointer? = p
            if let raw { EVP_CIPHER_CTX_free(OpaquePointer(raw)) }
        }
        return Slot(key: key, valid: rc == 0)
    }()

    static func take() -> OpaquePointer? {
        let s = slot
        guard s.valid, let p = pthread_getspecific(s.key) else { return nil }
        guard pthread_setspecific(s.key, nil) == 0 else { return nil }
        return OpaquePointer(p)
    }

    static func give(_ ctx: OpaquePointer) {
        let s = slot
        if s.valid, pthread_getspecific(s.key) == nil, pthread_setspecific(s.key, UnsafeRawPointer(ctx)) == 0 {
            return
        }
        EVP_CIPHER_CTX_free(ctx)
    }
}
