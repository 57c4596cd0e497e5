#pragma once
// CRC-32C (Castagnoli), the checksum of TFRecord framing: TensorBoard's
// event files carry it twice per record, masked.
#include <cstddef>
#include <cstdint>

namespace actorpipe {

/// CRC-32C of `n` bytes at `data` (reflected polynomial 0x82F63B78, the
/// usual init and final xor). `crc` continues an earlier result:
/// crc32c(b, m, crc32c(a, n)) is the checksum of a followed by b.
/// crc32c("123456789", 9) == 0xE3069283.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

/// TFRecord's masked CRC-32C: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
/// The mask keeps a checksum that is itself checksummed from looking valid.
uint32_t masked_crc32c(const void* data, size_t n);

}  // namespace actorpipe
