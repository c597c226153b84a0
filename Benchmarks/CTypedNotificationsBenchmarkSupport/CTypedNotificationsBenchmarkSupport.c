#include "CTypedNotificationsBenchmarkSupport.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#ifdef __APPLE__
#include <TargetConditionals.h>
#endif

#if defined(__APPLE__) && (TARGET_OS_TV || TARGET_OS_WATCH)
int cbs_spawn_dying_with_parent(const char *path, char *const argv[], char *const envp[], int output, int unused) {
    (void)path;
    (void)argv;
    (void)envp;
    (void)output;
    (void)unused;
    errno = ENOTSUP;
    return -1;
}
#else
int cbs_spawn_dying_with_parent(const char *path, char *const argv[], char *const envp[], int output, int unused) {
    pid_t parent = getpid();
    pid_t child = fork();
    if (child != 0) return child;
    // In the child, between fork and exec: async-signal-safe calls only.
    // Signals the parent blocked stay blocked across fork and exec: a
    // server started by a process that blocks SIGTERM would ignore it.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
#ifdef __linux__
    // SIGKILL: nothing can block or ignore it, and the benchmark's server
    // keeps nothing worth a clean shutdown.
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) _exit(127);
    // The parent ended before the signal was asked for: end now.
    if (getppid() != parent) _exit(0);
#else
    (void)parent;
#endif
    if (unused >= 0) close(unused);
    if (output < 0) output = open("/dev/null", O_WRONLY);
    if (output >= 0 && output != 1) {
        dup2(output, 1);
        close(output);
    }
    execve(path, argv, envp);
    _exit(127);
}
#endif
