// The few things Swift cannot reach directly: the CMSG_* macros that carry
// sender credentials, O_PATH, and the headers of epoll and eventfd. Each function
// returns -1 and leaves errno set on failure, like the calls it wraps.
#ifndef C_TYPED_NOTIFICATIONS_H
#define C_TYPED_NOTIFICATIONS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __linux__
// Not in Swift's Glibc module: the event loop's epoll and eventfd.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#endif

/// The sender of a datagram, as the kernel reported it.
typedef struct {
    int present;  // 1 if the kernel attached credentials, else 0
    pid_t pid;
    uid_t uid;
    gid_t gid;
} ctn_credentials;

/// Linux: opens `path` (relative to the directory descriptor `at`, or to the
/// working directory when `at` is negative) with O_PATH, a close-on-exec
/// descriptor that only names the file, for /proc/self/fd/N: a directory
/// when `directory` is 1 (O_DIRECTORY). A final symbolic link is never
/// followed (O_NOFOLLOW). Elsewhere fails with ENOTSUP.
int ctn_open_location(int at, const char *path, int directory);

/// Bytes a socket sent that its peer has not read yet, or -1 with errno.
int ctn_unread_sent_bytes(int fd);

/// Asks the kernel to attach the sender's credentials to every datagram
/// received on `fd` (SO_PASSCRED). Returns 0 where the platform has no such
/// option; `credentials_supported` says which.
int ctn_enable_credentials(int fd);

/// 1 where received datagrams can carry the sender's credentials.
int ctn_credentials_supported(void);

/// The most datagrams `ctn_receive_datagrams` takes in one call.
#define CTN_RECEIVE_BATCH_MAX 64

/// One datagram of a batch.
typedef struct {
    size_t length;
    int truncated;  // 1 when it was longer than its slot
    ctn_credentials credentials;
} ctn_received;

/// Receives up to `count` (at most CTN_RECEIVE_BATCH_MAX) datagrams without
/// blocking, in one system call (recvmmsg): the i-th into `buffer + i *
/// slot_length`, described by `results[i]`. Returns how many, or -1 with
/// errno (EAGAIN when none is waiting). Fewer than `count` means the socket
/// was drained, where `ctn_receive_datagrams_at_once` says so; elsewhere
/// one datagram is received per call.
int ctn_receive_datagrams(int fd, void *buffer, size_t slot_length, unsigned count, ctn_received *results);

/// Like `ctn_receive_datagrams`, on a socket in blocking mode: waits until
/// the first datagram arrives, or the socket's receive timeout (SO_RCVTIMEO)
/// passes (-1 with EAGAIN), then takes what else is waiting without
/// waiting (MSG_WAITFORONE). Linux only: elsewhere -1 with ENOTSUP.
int ctn_receive_datagrams_waiting(int fd, void *buffer, size_t slot_length, unsigned count, ctn_received *results);

/// Asks that reads through `fd` leave the file's access time alone
/// (O_NOATIME, Linux), where the caller owns the file: 0, or -1 with errno
/// (EPERM: another user's file; ENOTSUP elsewhere). The descriptor works as
/// before either way.
int ctn_skip_access_time(int fd);

/// The size, link count and identity (device, inode) of the open file `fd`,
/// read without its timestamps: 0, or -1 with errno. On Linux this is
/// `statx` asking for those fields only. Asking for a file's modification
/// or change time, as `fstat` does, marks it queried on file systems with
/// multigrain timestamps (Linux 6.13 and later), so that the file's next
/// write stamps a fine-grained time and dirties its inode; a size and a
/// link count leave the next write as cheap as if nobody had looked. Where
/// `statx` is missing or refused (ENOSYS, EPERM under an old seccomp
/// filter), and on other systems, it is `fstat`.
int ctn_file_extent(int fd, int64_t *size, uint64_t *links, uint64_t *device, uint64_t *inode);

/// Like `ctn_file_extent`, for the file at `path`, whose last part is not
/// followed if it is a symbolic link (`lstat` where `statx` is missing or
/// refused, and on other systems).
int ctn_path_extent(const char *path, int64_t *size, uint64_t *links, uint64_t *device, uint64_t *inode);

/// Opens an unnamed regular file in `directory` for reading and writing,
/// mode 0600, close-on-exec (O_TMPFILE): a descriptor, or -1 with errno.
/// Linux only: elsewhere -1 with ENOTSUP.
int ctn_open_unnamed_file(const char *directory);

/// 1 where `ctn_receive_datagrams` receives several in one call (Linux).
int ctn_receive_datagrams_at_once(void);

/// Connects a non-blocking, close-on-exec stream socket: to `host`:`port`
/// over TCP (with TCP_NODELAY, trying each address the name resolves to),
/// or, when `port` is NULL, to the Unix socket path `host`. Waits at most
/// `timeout_ms` milliseconds for each attempt. Returns the descriptor; -1
/// with errno (ETIMEDOUT when the wait ran out); or -2 when `host` did not
/// resolve, with `*resolve_error` set to getaddrinfo's code.
int ctn_connect_stream(const char *host, const char *port, int timeout_ms, int *resolve_error);

/// getaddrinfo's text for one of its error codes.
const char *ctn_resolve_error_text(int code);

/// Sends bytes on a connected stream socket without blocking and without
/// raising SIGPIPE.
ssize_t ctn_send_stream(int fd, const void *bytes, size_t length);

/// Creates a pipe whose ends are close-on-exec from the start (pipe2 on
/// Linux), so a process spawned meanwhile by another thread cannot inherit them.
int ctn_pipe_cloexec(int descriptors[2]);

/// Apple platforms: posts the notify(3) name `name` (notify_post). Elsewhere
/// a no-op that returns 0: there, inotify sees the write itself.
int ctn_signal_post(const char *name);

/// Apple platforms: makes `*descriptor` readable whenever `name` is posted
/// (notify_register_file_descriptor; pass -1 first, then the same descriptor
/// to add names). `*token` is what the descriptor then yields for this name:
/// 4 bytes, in network byte order, per post. Elsewhere fails with ENOTSUP.
int ctn_signal_register(const char *name, int *descriptor, int *token);

/// Installs handlers for SIGINT and SIGTERM that write one byte to
/// `write_descriptor` (the self-pipe trick: async-signal-safe, and nothing is
/// lost once this returns). A thread reading the pipe then shuts down cleanly.
int ctn_install_termination_pipe(int write_descriptor);

/// Reads a counter that other processes change through a shared mapping
/// (acquire ordering: what the process that changed it wrote before is seen).
uint64_t ctn_shared_load(const uint64_t *counter);

/// Adds one to such a counter (acquire-release) and returns the new value.
uint64_t ctn_shared_increment(uint64_t *counter);

/// Names the calling thread for the system's tools (`top -H`, `perf`,
/// `/proc/self/task/*/comm`); Linux keeps the first 15 bytes.
void ctn_name_current_thread(const char *name);

#endif
