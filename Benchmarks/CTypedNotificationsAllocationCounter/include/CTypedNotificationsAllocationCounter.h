#ifndef C_TYPED_NOTIFICATIONS_ALLOCATION_COUNTER_H
#define C_TYPED_NOTIFICATIONS_ALLOCATION_COUNTER_H

#include <stdint.h>

/// Heap allocations (malloc, calloc, realloc, memalign and friends) made by
/// this process so far, or -1 where they cannot be counted (not glibc).
int64_t tnb_allocation_count(void);

/// Heap bytes in use: what every live allocation of every thread's arena
/// holds (malloc_usable_size, counted by the interposer on each allocation
/// and free), or -1 where unknown.
int64_t tnb_heap_bytes_in_use(void);

#endif
