#define _GNU_SOURCE
#include "CTypedNotifications.h"

#include <errno.h>
#include <signal.h>
#ifdef __APPLE__
#include <notify.h>
#endif
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/stat.h>
#ifdef __linux__
#include <sys/sysmacros.h>
#endif
#include <unistd.h>

// Darwin has no MSG_CMSG_CLOEXEC: a descriptor a hostile peer passes is
// closed as soon as the control data is read (see read_control), so it is
// open without close-on-exec only for that moment.
#ifdef MSG_CMSG_CLOEXEC
#define CTN_RECEIVE_FLAGS (MSG_DONTWAIT | MSG_CMSG_CLOEXEC)
#else
#define CTN_RECEIVE_FLAGS MSG_DONTWAIT
#endif

int ctn_open_location(int at, const char *path, int directory) {
#ifdef O_PATH
    // A descriptor that only names the file: it can be stat'ed and used as
    // /proc/self/fd/N, not read. A final symbolic link is never followed.
    int flags = O_PATH | O_CLOEXEC | O_NOFOLLOW | (directory ? O_DIRECTORY : 0);
    return openat(at < 0 ? AT_FDCWD : at, path, flags);
#else
    (void)at;
    (void)path;
    (void)directory;
    errno = ENOTSUP;
    return -1;
#endif
}

int ctn_unread_sent_bytes(int fd) {
#if defined(__linux__)
    /* For a Unix datagram socket, TIOCOUTQ (SIOCOUTQ) is the memory of the
       datagrams it sent that their receiver has not read yet. */
    int value = 0;
    if (ioctl(fd, TIOCOUTQ, &value) != 0) return -1;
    return value;
#elif defined(__APPLE__)
    int value = 0;
    socklen_t length = sizeof(value);
    if (getsockopt(fd, SOL_SOCKET, SO_NWRITE, &value, &length) != 0) return -1;
    return value;
#else
    errno = ENOTSUP;
    return -1;
#endif
}

int ctn_credentials_supported(void) {
#ifdef SO_PASSCRED
    return 1;
#else
    return 0;
#endif
}

int ctn_enable_credentials(int fd) {
#ifdef SO_PASSCRED
    int on = 1;
    return setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &on, sizeof(on));
#else
    (void)fd;
    return 0;
#endif
}

// What a received message's control data says: the sender's credentials.
// Descriptors a hostile peer passed are closed, never kept.
static void read_control(struct msghdr *message, ctn_credentials *credentials) {
    memset(credentials, 0, sizeof(*credentials));
    if (message->msg_controllen == 0) return;
    for (struct cmsghdr *header = CMSG_FIRSTHDR(message); header != NULL; header = CMSG_NXTHDR(message, header)) {
        if (header->cmsg_level != SOL_SOCKET) continue;
#ifdef SCM_CREDENTIALS
        if (header->cmsg_type == SCM_CREDENTIALS && header->cmsg_len >= CMSG_LEN(sizeof(struct ucred))) {
            struct ucred peer;
            memcpy(&peer, CMSG_DATA(header), sizeof(peer));
            credentials->present = 1;
            credentials->pid = peer.pid;
            credentials->uid = peer.uid;
            credentials->gid = peer.gid;
            continue;
        }
#endif
        // Every platform: descriptors a hostile peer passed are closed unread
        // (on Darwin, SCM_RIGHTS is the one control message a datagram carries).
        if (header->cmsg_type == SCM_RIGHTS && header->cmsg_len >= CMSG_LEN(0)) {
            size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t index = 0; index < count; index++) {
                int descriptor;
                memcpy(&descriptor, CMSG_DATA(header) + index * sizeof(int), sizeof(int));
                close(descriptor);
            }
        }
    }
}

// Room for the credentials, or for a few descriptors a hostile peer sends.
typedef union {
    struct cmsghdr align;
#ifdef SCM_CREDENTIALS
    char space[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(4 * sizeof(int))];
#else
    char space[CMSG_SPACE(4 * sizeof(int))];
#endif
} control_space;

#ifndef __linux__
// One datagram per call, where recvmmsg does not exist.
static ssize_t receive_one(int fd, void *buffer, size_t length, ctn_credentials *credentials, int *truncated) {
    struct iovec vector = {.iov_base = buffer, .iov_len = length};
    control_space control;
    struct msghdr message;
    memset(&message, 0, sizeof(message));
    memset(&control, 0, sizeof(control));
    message.msg_iov = &vector;
    message.msg_iovlen = 1;
    message.msg_control = control.space;
    message.msg_controllen = sizeof(control.space);

    memset(credentials, 0, sizeof(*credentials));
    *truncated = 0;
    ssize_t received = recvmsg(fd, &message, CTN_RECEIVE_FLAGS);
    if (received < 0) return -1;
    if (message.msg_flags & MSG_TRUNC) *truncated = 1;
    read_control(&message, credentials);
    return received;
}
#endif

int ctn_receive_datagrams_at_once(void) {
#ifdef __linux__
    return 1;
#else
    return 0;
#endif
}

// Receives up to `count` datagrams; with `wait`, the call blocks until the
// first arrives (or the socket's receive timeout passes), then takes what
// else is waiting without blocking (Linux's MSG_WAITFORONE).
static int receive_datagrams(
    int fd, void *buffer, size_t slot_length, unsigned count, ctn_received *results, int wait) {
    if (count == 0) return 0;
#ifdef __linux__
    if (count > CTN_RECEIVE_BATCH_MAX) count = CTN_RECEIVE_BATCH_MAX;
    struct mmsghdr messages[CTN_RECEIVE_BATCH_MAX];
    struct iovec vectors[CTN_RECEIVE_BATCH_MAX];
    control_space controls[CTN_RECEIVE_BATCH_MAX];
    memset(messages, 0, sizeof(struct mmsghdr) * count);
    for (unsigned index = 0; index < count; index++) {
        vectors[index].iov_base = (char *)buffer + (size_t)index * slot_length;
        vectors[index].iov_len = slot_length;
        messages[index].msg_hdr.msg_iov = &vectors[index];
        messages[index].msg_hdr.msg_iovlen = 1;
        messages[index].msg_hdr.msg_control = controls[index].space;
        messages[index].msg_hdr.msg_controllen = sizeof(controls[index].space);
    }
    int flags = wait ? (MSG_WAITFORONE | MSG_CMSG_CLOEXEC) : CTN_RECEIVE_FLAGS;
    int received = recvmmsg(fd, messages, count, flags, NULL);
    if (received < 0) return -1;
    for (int index = 0; index < received; index++) {
        results[index].length = messages[index].msg_len;
        results[index].truncated = (messages[index].msg_hdr.msg_flags & MSG_TRUNC) ? 1 : 0;
        read_control(&messages[index].msg_hdr, &results[index].credentials);
    }
    return received;
#else
    if (wait) {
        errno = ENOTSUP;
        return -1;
    }
    ssize_t received = receive_one(fd, buffer, slot_length, &results[0].credentials, &results[0].truncated);
    if (received < 0) return -1;
    results[0].length = (size_t)received;
    return 1;
#endif
}

int ctn_receive_datagrams(int fd, void *buffer, size_t slot_length, unsigned count, ctn_received *results) {
    return receive_datagrams(fd, buffer, slot_length, count, results, 0);
}

int ctn_receive_datagrams_waiting(int fd, void *buffer, size_t slot_length, unsigned count, ctn_received *results) {
    return receive_datagrams(fd, buffer, slot_length, count, results, 1);
}

// A non-blocking, close-on-exec socket; on Apple platforms also without SIGPIPE.
static int stream_socket(int family) {
#ifdef __linux__
    return socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
#else
    int fd = socket(family, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    int on = 1;
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) != 0 || fcntl(fd, F_SETFL, O_NONBLOCK) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &on, sizeof(on)) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
#endif
}

// Connects `fd` to `address`, waiting at most `timeout_ms`; closes it on failure.
static int finish_connect(int fd, const struct sockaddr *address, socklen_t length, int timeout_ms) {
    int result;
    do {
        result = connect(fd, address, length);
    } while (result != 0 && errno == EINTR);
    if (result != 0 && errno == EINPROGRESS) {
        struct pollfd polled = {.fd = fd, .events = POLLOUT, .revents = 0};
        int ready;
        do {
            ready = poll(&polled, 1, timeout_ms);
        } while (ready < 0 && errno == EINTR);
        if (ready == 0) {
            errno = ETIMEDOUT;
        } else if (ready > 0) {
            int failure = 0;
            socklen_t size = sizeof(failure);
            if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &failure, &size) == 0) {
                errno = failure;
                result = failure == 0 ? 0 : -1;
            }
        }
    }
    if (result != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

// The address of a Unix socket path that fits in sun_path; ENAMETOOLONG
// for one that does not (Redis's socket, whose path the user gives).
static int make_address(struct sockaddr_un *address, const char *path, socklen_t *length) {
    size_t path_length = strlen(path);
    if (path_length == 0 || path_length >= sizeof(address->sun_path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memset(address, 0, sizeof(*address));
    address->sun_family = AF_UNIX;
    memcpy(address->sun_path, path, path_length + 1);
    *length = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + path_length + 1);
    return 0;
}

int ctn_connect_stream(const char *host, const char *port, int timeout_ms, int *resolve_error) {
    *resolve_error = 0;
    if (port == NULL) {
        struct sockaddr_un address;
        socklen_t length;
        if (make_address(&address, host, &length) != 0) return -1;
        int fd = stream_socket(AF_UNIX);
        if (fd < 0) return -1;
        return finish_connect(fd, (struct sockaddr *)&address, length, timeout_ms);
    }
    struct addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    struct addrinfo *found = NULL;
    int code = getaddrinfo(host, port, &hints, &found);
    if (code != 0) {
        *resolve_error = code;
        return -2;
    }
    int last_error = ECONNREFUSED;
    for (struct addrinfo *candidate = found; candidate != NULL; candidate = candidate->ai_next) {
        int fd = stream_socket(candidate->ai_family);
        if (fd < 0) {
            last_error = errno;
            continue;
        }
        fd = finish_connect(fd, candidate->ai_addr, candidate->ai_addrlen, timeout_ms);
        if (fd < 0) {
            last_error = errno;
            continue;
        }
        int on = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
        freeaddrinfo(found);
        return fd;
    }
    freeaddrinfo(found);
    errno = last_error;
    return -1;
}

const char *ctn_resolve_error_text(int code) { return gai_strerror(code); }

ssize_t ctn_send_stream(int fd, const void *bytes, size_t length) {
#ifdef __linux__
    return send(fd, bytes, length, MSG_DONTWAIT | MSG_NOSIGNAL);
#else
    return send(fd, bytes, length, 0);
#endif
}

int ctn_pipe_cloexec(int descriptors[2]) {
#ifdef __linux__
    return pipe2(descriptors, O_CLOEXEC);
#else
    if (pipe(descriptors) != 0) return -1;
    fcntl(descriptors[0], F_SETFD, FD_CLOEXEC);
    fcntl(descriptors[1], F_SETFD, FD_CLOEXEC);
    return 0;
#endif
}

int ctn_signal_post(const char *name) {
#ifdef __APPLE__
    return notify_post(name) == NOTIFY_STATUS_OK ? 0 : -1;
#else
    (void)name;
    return 0;
#endif
}

int ctn_signal_register(const char *name, int *descriptor, int *token) {
#ifdef __APPLE__
    int flags = *descriptor >= 0 ? NOTIFY_REUSE : 0;
    return notify_register_file_descriptor(name, descriptor, flags, token) == NOTIFY_STATUS_OK ? 0 : -1;
#else
    (void)name;
    (void)descriptor;
    (void)token;
    errno = ENOTSUP;
    return -1;
#endif
}

static volatile sig_atomic_t termination_descriptor = -1;

static void termination_handler(int number) {
    int saved = errno;
    unsigned char byte = (unsigned char)number;
    if (termination_descriptor >= 0) (void)!write(termination_descriptor, &byte, 1);
    errno = saved;
}

int ctn_install_termination_pipe(int write_descriptor) {
    termination_descriptor = write_descriptor;
    struct sigaction action;
    memset(&action, 0, sizeof(action));
    action.sa_handler = termination_handler;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    if (sigaction(SIGINT, &action, NULL) != 0) return -1;
    return sigaction(SIGTERM, &action, NULL);
}

uint64_t ctn_shared_load(const uint64_t *counter) {
    return __atomic_load_n(counter, __ATOMIC_ACQUIRE);
}

uint64_t ctn_shared_increment(uint64_t *counter) {
    return __atomic_add_fetch(counter, 1, __ATOMIC_ACQ_REL);
}

void ctn_name_current_thread(const char *name) {
#ifdef __APPLE__
    pthread_setname_np(name);
#else
    char kept[16];
    strncpy(kept, name, sizeof kept - 1);
    kept[sizeof kept - 1] = 0;
    pthread_setname_np(pthread_self(), kept);
#endif
}

int ctn_open_unnamed_file(const char *directory) {
#ifdef O_TMPFILE
    return open(directory, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
#else
    (void)directory;
    errno = ENOTSUP;
    return -1;
#endif
}

static int extent_from_stat(const struct stat *info, int64_t *size, uint64_t *links, uint64_t *device,
                            uint64_t *inode) {
    *size = (int64_t)info->st_size;
    *links = (uint64_t)info->st_nlink;
    *device = (uint64_t)info->st_dev;
    *inode = (uint64_t)info->st_ino;
    return 0;
}

#if defined(__linux__) && defined(STATX_SIZE)
// Once statx is found missing or refused, every later call goes straight
// to fstat or lstat; a race between threads costs one extra try.
static _Atomic int statx_unusable = 0;

// 1: answered (0 or -1 with errno in *result); 0: use the old call.
static int extent_from_statx(int at, const char *path, int flags, int *result, int64_t *size, uint64_t *links,
                             uint64_t *device, uint64_t *inode) {
    if (statx_unusable) return 0;
    struct statx info;
    unsigned int wanted = STATX_SIZE | STATX_NLINK | STATX_INO;
    if (statx(at, path, flags, wanted, &info) == 0) {
        if ((info.stx_mask & wanted) != wanted) return 0;
        *size = (int64_t)info.stx_size;
        *links = (uint64_t)info.stx_nlink;
        *device = (uint64_t)makedev(info.stx_dev_major, info.stx_dev_minor);
        *inode = (uint64_t)info.stx_ino;
        *result = 0;
        return 1;
    }
    if (errno == ENOSYS || errno == EPERM) {
        statx_unusable = 1;
        return 0;
    }
    *result = -1;
    return 1;
}
#endif

int ctn_file_extent(int fd, int64_t *size, uint64_t *links, uint64_t *device, uint64_t *inode) {
#if defined(__linux__) && defined(STATX_SIZE)
    int result;
    if (extent_from_statx(fd, "", AT_EMPTY_PATH, &result, size, links, device, inode)) return result;
#endif
    struct stat info;
    if (fstat(fd, &info) != 0) return -1;
    return extent_from_stat(&info, size, links, device, inode);
}

int ctn_path_extent(const char *path, int64_t *size, uint64_t *links, uint64_t *device, uint64_t *inode) {
#if defined(__linux__) && defined(STATX_SIZE)
    int result;
    if (extent_from_statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, &result, size, links, device, inode)) return result;
#endif
    struct stat info;
    if (lstat(path, &info) != 0) return -1;
    return extent_from_stat(&info, size, links, device, inode);
}

int ctn_skip_access_time(int fd) {
#ifdef O_NOATIME
    int flags = fcntl(fd, F_GETFL);
    if (flags == -1) return -1;
    if (flags & O_NOATIME) return 0;
    return fcntl(fd, F_SETFL, flags | O_NOATIME);
#else
    (void)fd;
    errno = ENOTSUP;
    return -1;
#endif
}
