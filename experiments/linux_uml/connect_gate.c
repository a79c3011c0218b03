/* An LD_PRELOAD shim for kernel-tcp's guest: connect() waits until the file named by
 * UML_GO exists, then connects. The sender is started (exec, dynamic loading: ~150-250 ms in a
 * User-Mode Linux guest) before the receiver listens, and its SYN leaves as soon as the
 * receiver's wrapper creates the file. Part of the reference harness, not of the project. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <time.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>

int connect(int fd, const struct sockaddr *address, socklen_t length) {
    static int (*real_connect)(int, const struct sockaddr *, socklen_t);
    if (!real_connect)
        real_connect = (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "connect");
    const char *go = getenv("UML_GO");
    struct stat st;
    const struct timespec poll = {0, 500000}; /* 0.5 ms: a guest waiting 20 s must not spin */
    while (go && stat(go, &st) != 0)
        nanosleep(&poll, NULL);
    return real_connect(fd, address, length);
}
