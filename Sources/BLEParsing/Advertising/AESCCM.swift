internal import CLibCrypto

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
        guard let ctx = EVP_CIPHER_CTX_new() else { throw .library("EVP_CIPHER_CTX_new") }
        defer { EVP_CIPHER_CTX_free(ctx) }
        var tagCopy = tag
        var outLen: Int32 = 0
        var out = [UInt8](repeating: 0, count: max(ciphertext.count, 1))
        // Padding keeps every pointer non-nil even for empty inputs.
        let ct = ciphertext.isEmpty ? [0] : ciphertext
        let aadBuf = aad.isEmpty ? [0] : aad
        guard EVP_DecryptInit_ex(ctx, EVP_aes_128_ccm(), nil, nil, nil) == 1 else { throw .library("init") }
        guard EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_IVLEN, Int32(nonce.count), nil) == 1 else {
            throw .library("set nonce length")
        }
        let tagOK = tagCopy.withUnsafeMutableBytes { p in
            EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, Int32(tag.count), p.baseAddress)
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
        return Array(out.prefix(ciphertext.count))
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
        guard EVP_EncryptInit_ex(ctx, EVP_aes_128_ccm(), nil, nil, nil) == 1 else { throw .library("init") }
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
