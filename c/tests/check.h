/*
 * check.h: the assertions of every C test (c/tests, and the vector tests
 * that internal/testkit/cvectors writes). A check that fails prints where
 * and what, counts a failure and lets the test go on, so that one run
 * shows every failure; check_done ends a test with the count. Each test is
 * one program, so the counts are per program.
 */
#ifndef CHANOS_CHECK_H
#define CHANOS_CHECK_H

#include <chanos.h>

#include <limits.h>
#include <stdio.h>

/* checks counts the checks made, failures those that failed. */
static int checks;
static int failures;

/* check_context, when set, names what is being checked (a vector, a case)
 * in the message of a failed check. */
static const char *check_context;

/* check_where_ begins the message of a failed check. */
static inline void check_where_(const char *file, int line)
{
    if (check_context != NULL)
        fprintf(stderr, "%s:%d: %s: ", file, line, check_context);
    else
        fprintf(stderr, "%s:%d: ", file, line);
}

/* check_value_ prints a value of CHECK_EQ; a negative one is described as
 * a chanos result code, which is what most of them are. */
static inline void check_value_(long long v)
{
    if (v < 0 && v >= INT_MIN)
        fprintf(stderr, "%lld (%s)", v, chanos_strerror((int)v));
    else
        fprintf(stderr, "%lld", v);
}

/* check_eq_failed_ reports a CHECK_EQ that failed. */
static inline void check_eq_failed_(const char *file, int line,
                                    const char *expr, long long got,
                                    long long want)
{
    check_where_(file, line);
    fprintf(stderr, "%s = ", expr);
    check_value_(got);
    fprintf(stderr, ", want ");
    check_value_(want);
    fprintf(stderr, "\n");
    failures++;
}

/* CHECK fails unless cond holds. */
#define CHECK(cond)                                                          \
    do {                                                                     \
        checks++;                                                            \
        if (!(cond)) {                                                       \
            check_where_(__FILE__, __LINE__);                                \
            fprintf(stderr, "check failed: %s\n", #cond);                    \
            failures++;                                                      \
        }                                                                    \
    } while (0)

/* CHECK_EQ fails unless the integer got (a result code, a length, a
 * count) equals want. Each is evaluated once. */
#define CHECK_EQ(got, want)                                                  \
    do {                                                                     \
        long long got_ = (long long)(got), want_ = (long long)(want);        \
        checks++;                                                            \
        if (got_ != want_)                                                   \
            check_eq_failed_(__FILE__, __LINE__, #got, got_, want_);         \
    } while (0)

/* CHECK_STR fails unless the string got equals want. Each is evaluated
 * once. */
#define CHECK_STR(got, want)                                                 \
    do {                                                                     \
        const char *got_ = (got), *want_ = (want);                           \
        checks++;                                                            \
        if (strcmp(got_, want_) != 0) {                                      \
            check_where_(__FILE__, __LINE__);                                \
            fprintf(stderr, "%s =\n    \"%s\", want\n    \"%s\"\n", #got,    \
                    got_, want_);                                            \
            failures++;                                                      \
        }                                                                    \
    } while (0)

/* check_rnd returns the next number of a xorshift64 generator with a
 * fixed seed, for a test's random inputs: they are the same on every run,
 * so that a failure reproduces. One generator per program, for one
 * thread. */
static uint64_t check_rnd_state = 88172645463325252ull;

static inline uint64_t check_rnd(void)
{
    check_rnd_state ^= check_rnd_state << 13;
    check_rnd_state ^= check_rnd_state >> 7;
    check_rnd_state ^= check_rnd_state << 17;
    return check_rnd_state;
}

/* check_done prints the counts of the test named name and returns its
 * exit status: 0 if every check held. */
static inline int check_done(const char *name)
{
    if (failures != 0) {
        fprintf(stderr, "%s: %d of %d checks failed\n", name, failures,
                checks);
        return 1;
    }
    printf("%s: %d checks, ok\n", name, checks);
    return 0;
}

#endif
