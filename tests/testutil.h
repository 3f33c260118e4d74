/* Helpers shared by the Check suites: random data, float64 comparisons, finite differences, a
 * temporary STARPU_HOME and the runner main(). */
#ifndef TSR_TESTUTIL_H
#define TSR_TESTUTIL_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

/* Uniform values in [lo, hi) from a fixed seed (xorshift; identical on every machine). */
void tt_fill_uniform(float *x, size_t n, uint64_t seed, float lo, float hi);
void tt_fill_uniform_d(double *x, size_t n, uint64_t seed, double lo, double hi);
/* Largest |a - ref| / (atol + rtol |ref|) over n values: <= 1 means within tolerance. Writes the
 * worst index to *where if not NULL. */
double tt_err_ratio(const float *a, const double *ref, size_t n, double atol, double rtol, size_t *where);
/* Asserts tt_err_ratio <= 1 and names `what`, the index and both values when it is not. */
#define tt_assert_close(a, ref, n, atol, rtol, what)                                               \
  do {                                                                                             \
    size_t _w = 0;                                                                                 \
    double _r = tt_err_ratio((a), (ref), (n), (atol), (rtol), &_w);                                \
    ck_assert_msg(_r <= 1.0, "%s: element %zu is %.8g, reference %.8g (error %.3g x tolerance)", \
                  (what), _w, (double)(a)[_w], (double)(ref)[_w], _r);                             \
  } while (0)

/* Central finite differences of a scalar function of x (float) at every index: grad[i] ~ dL/dx[i].
 * loss(user) must read x. h is the step. */
void tt_fd_grad(float *x, size_t n, double (*loss)(void *user), void *user, double h, double *grad);

/* Sets STARPU_HOME to a fresh temporary folder (perfmodels go there) once per process. */
void tt_starpu_home(void);
/* Starts/stops StarPU with `ncpus` CPU workers (checked fixtures call these). */
void tt_starpu_start(int ncpus);
void tt_starpu_stop(void);

/* A fresh temporary folder (removed by nobody: under /tmp). */
const char *tt_tmpdir(void);
/* "dir/name" in one of four rotating static buffers (so up to four may be live at once). */
char *tt_path_in(const char *dir, const char *name);

/* Allows 1 GiB more address space than now, so that code allocating what it should have refused
 * fails at once instead of filling the machine (Check runs each test in its own process, so the
 * limit ends with it). Does nothing under ASan, which reserves terabytes of shadow memory. */
void tt_cap_address_space(void);

/* Records that the running test could not check what it is for, and why (a tool or a CPU feature
 * is missing); the test then returns. The suite still runs its other tests; tt_run_suite prints
 * the reasons and returns 77 (automake's SKIP) when nothing failed: a skip never passes. */
void tt_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Runs the suite; returns the process exit status: 0 when every test passed, 77 when none failed
 * and some called tt_skip, 1 otherwise. */
int tt_run_suite(Suite *s);

#define TT_MAIN(make_suite)                                                                        \
  int main(void) { return tt_run_suite(make_suite()); }

/* The small trainable net of the optimizer tests: input 1x6x6, conv2d 'c1' (3 channels, 3x3, padding
 * 1), tanh 'r1', conv2d 'out' (1 channel); tt_fill_small gives its samples (a smooth input and a
 * linear target of it), and tt_train_steps submits `steps` steps of them and reads their losses. */
struct tsr_model;
struct tsr_trainer;
struct tsr_model *tt_small_model(const char *name);
int tt_fill_small(void *user, int64_t step, int index, float *x, float *y);
void tt_train_steps(struct tsr_trainer *t, int steps, double *loss);
/* A DenseNet-like graph of layout and precision tests, input 2 x side x side: conv 'c0' (c0
 * channels, 3x3) -> batch norm 'bn0' -> activation 'r0' (kind `act`) -> conv 'c1' (c1 channels);
 * concat 'cat'(c0, c1) -> 'bn1' -> 'r1' (`act`) -> 2x2 pooling 'pool' (kind `pool`) -> transposed
 * conv 'up' (up channels, 2x2, stride 2); 1x1 conv 'c2' (up channels) of r1; add 'sum'(up, c2) ->
 * tanh 't' -> conv 'out' (1 channel, 3x3), MSE loss. act and pool are tsr_layer_kind values. */
struct tsr_model *tt_dense_model(int side, int c0, int c1, int up, int act, int pool);

#endif
