#ifndef BLECOMPANION_CLIBCRYPTO_SHIM_H
#define BLECOMPANION_CLIBCRYPTO_SHIM_H
// Not API: the system's libcrypto (OpenSSL) EVP interface, for AES-CCM only.
#include <openssl/evp.h>
#endif
