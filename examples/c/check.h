/* Shared by the C examples: stop the rank with a message when a call fails or a result is
 * wrong (rdcoll-run then reports the job as failed). */
#ifndef RDCOLL_EXAMPLE_CHECK_H
#define RDCOLL_EXAMPLE_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include <rdcoll.h>

/* Calls `call`; on an error code prints it with its text and exits. */
#define CHECK(call)                                                                     \
    do {                                                                                \
        int check_rc_ = (call);                                                         \
        if (check_rc_ != RDC_SUCCESS) {                                                 \
            fprintf(stderr, "%s:%d: %s failed: %d (%s)\n", __FILE__, __LINE__, #call,   \
                    check_rc_, rdc_strerror(check_rc_));                                \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

/* Exits with a message unless `cond` holds. */
#define EXPECT(cond, ...)                                                               \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "%s:%d: expected %s: ", __FILE__, __LINE__, #cond);         \
            fprintf(stderr, __VA_ARGS__);                                               \
            fprintf(stderr, "\n");                                                      \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

#endif
