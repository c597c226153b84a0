// What the benchmark needs from C and the library does not: starting its
// own processes so that they die with it. Never linked into the library.
#ifndef C_TYPED_NOTIFICATIONS_BENCHMARK_SUPPORT_H
#define C_TYPED_NOTIFICATIONS_BENCHMARK_SUPPORT_H

/// Starts `path` with `argv` and `envp`, with no signal blocked, as a child
/// that is sent SIGKILL when this process ends however it ends (a signal,
/// SIGKILL, a closed pipe): Linux's PR_SET_PDEATHSIG. Its standard output
/// is `output`, or /dev/null when `output` is negative; `unused`, unless
/// negative, is closed in the child. For the benchmark's own processes
/// and redis-server. Returns the child's pid, or -1 with errno. On macOS
/// the child is started without the death signal; where processes cannot
/// be started (tvOS, watchOS) it fails with ENOTSUP.
int cbs_spawn_dying_with_parent(const char *path, char *const argv[], char *const envp[], int output, int unused);

#endif
