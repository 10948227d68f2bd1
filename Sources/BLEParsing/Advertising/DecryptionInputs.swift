import Vocabulary
/// The two inputs every encrypted format needs before decrypting: the
/// bindkey and the device address (part of the nonce). Missing either is an
/// `unsupported` error naming what is missing, at `offset`.
func requireDecryptionInputs(_ bindkey: [UInt8]?, _ address: BluetoothAddress?, context: String, offset: Int)
    throws(DecodeError) -> (key: [UInt8], address: BluetoothAddress)
{
    guard let key = bindkey else {
        throw DecodeError(kind: .unsupported, context: context, offset: offset,
                          expected: "a bindkey for the encrypted payload", found: "no bindkey")
    }
    guard let address else {
        throw DecodeError(kind: .unsupported, context: context, offset: offset,
                          expected: "the device MAC address (nonce input)", found: "no address")
    }
    return (key, address)
}
