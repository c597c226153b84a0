// CRC-32C (Castagnoli) for the envelope, the file log and the socket spool:
// in hardware where the processor has an instruction for it (SSE4.2 on
// x86-64, the CRC extension on ARMv8), chosen once at load time, and in
// software (slicing by 8) everywhere else.
//
// Every function takes and returns the *running* value: start from
// 0xFFFFFFFF and XOR the result with 0xFFFFFFFF for the checksum, so a record
// can be checksummed in pieces.
#ifndef C_TYPED_NOTIFICATIONS_CHECKSUM_H
#define C_TYPED_NOTIFICATIONS_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

/// The running CRC-32C after `bytes`, by the fastest path this processor has.
uint32_t ctc_crc32c(uint32_t running, const void *bytes, size_t length);

/// The same by the software path alone (slicing by 8), on every processor.
uint32_t ctc_crc32c_software(uint32_t running, const void *bytes, size_t length);

/// The same by the hardware instruction, one stream (at most 8 bytes per
/// instruction, each waiting for the one before). Only when
/// `ctc_crc32c_hardware_available()` says so.
uint32_t ctc_crc32c_hardware_serial(uint32_t running, const void *bytes, size_t length);

/// The same by the hardware instruction, three interleaved streams for long
/// inputs, combined by table-driven shifts. What `ctc_crc32c` uses where the
/// instruction exists. Only when `ctc_crc32c_hardware_available()` says so.
uint32_t ctc_crc32c_hardware(uint32_t running, const void *bytes, size_t length);

/// 1 when this processor has the CRC-32C instruction, else 0.
int ctc_crc32c_hardware_available(void);

/// The bytes per stream at which the hardware path interleaves three streams:
/// `long_block` for the longest inputs, `short_block` below 3 × `long_block`.
/// Tests use these to cover each path.
void ctc_crc32c_block_sizes(size_t *long_block, size_t *short_block);

#endif
