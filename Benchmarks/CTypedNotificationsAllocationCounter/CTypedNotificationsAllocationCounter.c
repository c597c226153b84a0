// Counts heap allocations in the benchmark process by interposing the glibc
// allocator's entry points and forwarding to glibc's own implementations.
// Linked only into the benchmark executable, never into the library.

#include "CTypedNotificationsAllocationCounter.h"

#if defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define TNB_SANITIZED 1
#endif
#endif

// A sanitizer replaces the allocator with its own, and memory taken from
// glibc's behind its back crashes the process when the sanitizer frees it.
// Under a sanitizer (the test bundle links this target through its
// dependency on the benchmark) nothing is interposed and nothing is counted.
#if defined(__GLIBC__) && !defined(TNB_SANITIZED)
#include <errno.h>
#include <malloc.h>
#include <stddef.h>

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *pointer, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);
extern void __libc_free(void *pointer);

static int64_t allocations;
static int64_t live_bytes;

static inline void counted(void) { __atomic_fetch_add(&allocations, 1, __ATOMIC_RELAXED); }

// Every allocation adds what it really holds and every free takes it back,
// whichever thread's arena it lives in (mallinfo2 sees only the main arena).
static inline void *holding(void *pointer) {
    if (pointer != NULL) __atomic_fetch_add(&live_bytes, (int64_t)malloc_usable_size(pointer), __ATOMIC_RELAXED);
    return pointer;
}

static inline void releasing(void *pointer) {
    if (pointer != NULL) __atomic_fetch_sub(&live_bytes, (int64_t)malloc_usable_size(pointer), __ATOMIC_RELAXED);
}

int64_t tnb_allocation_count(void) { return __atomic_load_n(&allocations, __ATOMIC_RELAXED); }

int64_t tnb_heap_bytes_in_use(void) { return __atomic_load_n(&live_bytes, __ATOMIC_RELAXED); }

void *malloc(size_t size) {
    counted();
    return holding(__libc_malloc(size));
}

void *calloc(size_t count, size_t size) {
    counted();
    return holding(__libc_calloc(count, size));
}

void *realloc(void *pointer, size_t size) {
    counted();
    releasing(pointer);
    void *moved = __libc_realloc(pointer, size);
    if (moved == NULL && size != 0) {
        holding(pointer);  // it failed: the old block stays
        return NULL;
    }
    return holding(moved);
}

void free(void *pointer) {
    releasing(pointer);
    __libc_free(pointer);
}

void *memalign(size_t alignment, size_t size) {
    counted();
    return holding(__libc_memalign(alignment, size));
}

void *aligned_alloc(size_t alignment, size_t size) {
    counted();
    return holding(__libc_memalign(alignment, size));
}

int posix_memalign(void **result, size_t alignment, size_t size) {
    if (alignment < sizeof(void *) || (alignment & (alignment - 1)) != 0) return EINVAL;
    counted();
    void *pointer = holding(__libc_memalign(alignment, size));
    if (pointer == NULL && size != 0) return ENOMEM;
    *result = pointer;
    return 0;
}
#else
int64_t tnb_allocation_count(void) { return -1; }
int64_t tnb_heap_bytes_in_use(void) { return -1; }
#endif
