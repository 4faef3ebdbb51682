/*
 * monitor_child.h: a real `chanos monitor` (the CHANOS_CMD the test is
 * built with) run as a child process of a C test, in a directory of the
 * test's.
 */
#ifndef CHANOS_TESTS_MONITOR_CHILD_H
#define CHANOS_TESTS_MONITOR_CHILD_H

#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/*
 * monitor_start forks `chanos monitor --dir dir`, its output appended to
 * the file log, and waits up to 10 s for it to create its socket sock:
 * the child's pid, or -1, said on stderr, if the monitor exited or did
 * not listen in time. A test that crashes takes the monitor with it
 * (PR_SET_PDEATHSIG).
 */
static pid_t monitor_start(const char *dir, const char *sock, const char *log)
{
    pid_t parent = getpid(), pid = fork();

    if (pid < 0) {
        perror("fork");
        return -1;
    }
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);

        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (fd < 0 || getppid() != parent)
            _exit(126);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(CHANOS_CMD, "chanos", "monitor", "--dir", dir, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 1000; i++) {
        struct timespec ts = { 0, 10 * 1000000 };
        struct stat st;
        int status;

        if (stat(sock, &st) == 0)
            return pid;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            fprintf(stderr, "the monitor exited (status %d); see %s\n",
                    status, log);
            return -1;
        }
        nanosleep(&ts, NULL);
    }
    fprintf(stderr, "the monitor did not create %s within 10 s\n", sock);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

/* monitor_remove_one removes one file or directory of a tree nftw walks
 * from its leaves up. */
static int monitor_remove_one(const char *path, const struct stat *st,
                              int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/*
 * monitor_clean_up copies the monitor's log to stderr if the test failed
 * (show), then removes the log and the directory, with what the monitors
 * left in it (their spawn cache among it).
 */
static void monitor_clean_up(const char *dir, const char *log, int show)
{
    char line[512];
    FILE *f;

    if (show && (f = fopen(log, "r")) != NULL) {
        fprintf(stderr, "monitor log:\n");
        while (fgets(line, sizeof line, f) != NULL)
            fputs(line, stderr);
        fclose(f);
    }
    unlink(log);
    nftw(dir, monitor_remove_one, 8, FTW_DEPTH | FTW_PHYS);
}

/* monitor_stop stops the monitor pid (none if not above 0) with SIGTERM
 * and waits for it to end. */
static void monitor_stop(pid_t pid)
{
    if (pid > 0) {
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
    }
}

#endif
