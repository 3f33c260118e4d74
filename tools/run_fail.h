/* tessera-train and tessera-predict: the objects a failure must release before exiting, and the exits
 * after an error. */
#ifndef TSR_TOOLS_RUN_FAIL_H
#define TSR_TOOLS_RUN_FAIL_H

#include <tessera.h>

/* Everything a failure must release before exiting (NULL: not made yet, or released). */
struct train_live {
  tsr_context *ctx;
  tsr_trainer *t;
  tsr_model *m;
  tsr_loader *train, *val; /* tessera-predict: its input loader in train */
};
extern struct train_live live;

/* Releases everything in `live`. */
void release(void);
/* Ends the run after an error with the message (printf format), naming the rank under MPI. */
void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* fail() with the library's message when s is not TSR_OK. */
void check(tsr_status s);

#endif
