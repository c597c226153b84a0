// CRC-32C: polynomial 0x1EDC6F41, reflected (0x82F63B78). See CTypedNotificationsChecksum.h.
//
// The hardware path feeds 8 bytes per instruction. One instruction takes three
// cycles but a new one can start every cycle, so long inputs are cut into
// three blocks checksummed side by side and joined afterwards: for a running
// value c over A then B, crc(c, A‖B) = shift_|B|(crc(c, A)) ^ crc(0, B), and
// shifting by a fixed block length is four table look-ups. The tables are
// built once, at load time, by multiplying in GF(2) modulo the polynomial.
#include "CTypedNotificationsChecksum.h"

#include <string.h>

#if defined(__x86_64__)
#include <nmmintrin.h>
#define CTC_HARDWARE 1
#define CTC_TARGET __attribute__((target("sse4.2")))
CTC_TARGET static inline uint32_t step64(uint32_t crc, uint64_t word) { return (uint32_t)_mm_crc32_u64(crc, word); }
CTC_TARGET static inline uint32_t step8(uint32_t crc, uint8_t byte) { return _mm_crc32_u8(crc, byte); }
static int hardware_present(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2");
}
#elif defined(__aarch64__)
#include <arm_acle.h>
#define CTC_HARDWARE 1
#define CTC_TARGET __attribute__((target("crc")))
CTC_TARGET static inline uint32_t step64(uint32_t crc, uint64_t word) { return __crc32cd(crc, word); }
CTC_TARGET static inline uint32_t step8(uint32_t crc, uint8_t byte) { return __crc32cb(crc, byte); }
#if defined(__APPLE__)
// Every Apple processor with ARMv8 has the CRC extension.
static int hardware_present(void) { return 1; }
#elif defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1 << 7)
#endif
static int hardware_present(void) { return (getauxval(AT_HWCAP) & HWCAP_CRC32) != 0; }
#else
static int hardware_present(void) { return 0; }
#endif
#else
#define CTC_HARDWARE 0
#endif

#define POLYNOMIAL 0x82F63B78u
#define LONG_BLOCK 8192
#define SHORT_BLOCK 256

static uint32_t software_table[8][256];
static int hardware;
static uint32_t (*chosen)(uint32_t, const void *, size_t) = ctc_crc32c_software;

static inline uint64_t load64(const unsigned char *bytes) {
    uint64_t word;
    memcpy(&word, bytes, sizeof word);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    word = __builtin_bswap64(word);
#endif
    return word;
}

uint32_t ctc_crc32c_software(uint32_t crc, const void *bytes, size_t length) {
    const unsigned char *next = bytes;
    while (length >= 8) {
        uint64_t word = load64(next) ^ crc;
        crc = software_table[7][word & 0xFF] ^ software_table[6][(word >> 8) & 0xFF]
            ^ software_table[5][(word >> 16) & 0xFF] ^ software_table[4][(word >> 24) & 0xFF]
            ^ software_table[3][(word >> 32) & 0xFF] ^ software_table[2][(word >> 40) & 0xFF]
            ^ software_table[1][(word >> 48) & 0xFF] ^ software_table[0][word >> 56];
        next += 8;
        length -= 8;
    }
    while (length-- > 0) crc = (crc >> 8) ^ software_table[0][(crc ^ *next++) & 0xFF];
    return crc;
}

#if CTC_HARDWARE
static uint32_t long_shift[4][256];
static uint32_t short_shift[4][256];

// a × b modulo the polynomial, both reflected (x⁰ is the top bit).
static uint32_t multiply(uint32_t a, uint32_t b) {
    uint32_t product = 0;
    for (uint32_t bit = 1u << 31; bit != 0; bit >>= 1) {
        if (a & bit) product ^= b;
        b = (b & 1) ? (b >> 1) ^ POLYNOMIAL : b >> 1;
    }
    return product;
}

// x^(8 × bytes) modulo the polynomial: what appending that many zero bytes
// multiplies a running value by.
static uint32_t zeros_operator(size_t bytes) {
    uint32_t result = 1u << 31;  // x⁰
    uint32_t square = 1u << 30;  // x¹
    for (uint64_t bits = (uint64_t)bytes * 8; bits != 0; bits >>= 1) {
        if (bits & 1) result = multiply(square, result);
        square = multiply(square, square);
    }
    return result;
}

static void build_shift(uint32_t table[4][256], size_t bytes) {
    uint32_t operator = zeros_operator(bytes);
    for (int lane = 0; lane < 4; lane++) {
        for (uint32_t byte = 0; byte < 256; byte++) table[lane][byte] = multiply(operator, byte << (8 * lane));
    }
}

static inline uint32_t shift(const uint32_t table[4][256], uint32_t crc) {
    return table[0][crc & 0xFF] ^ table[1][(crc >> 8) & 0xFF] ^ table[2][(crc >> 16) & 0xFF] ^ table[3][crc >> 24];
}

CTC_TARGET static inline uint32_t serial(uint32_t crc, const unsigned char *next, size_t length) {
    while (length >= 8) {
        crc = step64(crc, load64(next));
        next += 8;
        length -= 8;
    }
    while (length-- > 0) crc = step8(crc, *next++);
    return crc;
}

CTC_TARGET static inline uint32_t three_streams(
    uint32_t crc, const unsigned char **next, size_t *length, size_t block, const uint32_t table[4][256]
) {
    while (*length >= 3 * block) {
        const unsigned char *first = *next;
        uint32_t second = 0, third = 0;
        for (size_t offset = 0; offset < block; offset += 8) {
            crc = step64(crc, load64(first + offset));
            second = step64(second, load64(first + block + offset));
            third = step64(third, load64(first + 2 * block + offset));
        }
        crc = shift(table, shift(table, crc) ^ second) ^ third;
        *next += 3 * block;
        *length -= 3 * block;
    }
    return crc;
}

CTC_TARGET uint32_t ctc_crc32c_hardware(uint32_t crc, const void *bytes, size_t length) {
    const unsigned char *next = bytes;
    crc = three_streams(crc, &next, &length, LONG_BLOCK, long_shift);
    crc = three_streams(crc, &next, &length, SHORT_BLOCK, short_shift);
    return serial(crc, next, length);
}

CTC_TARGET uint32_t ctc_crc32c_hardware_serial(uint32_t crc, const void *bytes, size_t length) {
    return serial(crc, bytes, length);
}
#else
uint32_t ctc_crc32c_hardware(uint32_t crc, const void *bytes, size_t length) {
    return ctc_crc32c_software(crc, bytes, length);
}

uint32_t ctc_crc32c_hardware_serial(uint32_t crc, const void *bytes, size_t length) {
    return ctc_crc32c_software(crc, bytes, length);
}

static int hardware_present(void) { return 0; }
#endif

__attribute__((constructor)) static void choose(void) {
    for (uint32_t byte = 0; byte < 256; byte++) {
        uint32_t crc = byte;
        for (int bit = 0; bit < 8; bit++) crc = (crc & 1) ? (crc >> 1) ^ POLYNOMIAL : crc >> 1;
        software_table[0][byte] = crc;
    }
    for (int slice = 1; slice < 8; slice++) {
        for (int byte = 0; byte < 256; byte++) {
            uint32_t previous = software_table[slice - 1][byte];
            software_table[slice][byte] = (previous >> 8) ^ software_table[0][previous & 0xFF];
        }
    }
    // __builtin_cpu_supports answers with a bit mask under GCC: any nonzero is yes.
    hardware = hardware_present() != 0;
#if CTC_HARDWARE
    build_shift(long_shift, LONG_BLOCK);
    build_shift(short_shift, SHORT_BLOCK);
    if (hardware) chosen = ctc_crc32c_hardware;
#endif
}

uint32_t ctc_crc32c(uint32_t crc, const void *bytes, size_t length) { return chosen(crc, bytes, length); }

int ctc_crc32c_hardware_available(void) { return hardware; }

void ctc_crc32c_block_sizes(size_t *long_block, size_t *short_block) {
    *long_block = LONG_BLOCK;
    *short_block = SHORT_BLOCK;
}
