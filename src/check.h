/* check.h — the trainer's one error model, and the macros that check it.
 *
 * Every function in src/ that can fail returns int: 0 on success, -1 on failure. It takes the
 * caller's message buffer as its last two parameters (char *err, size_t errlen); the function
 * that finds the problem writes one message there, saying what failed and what to do about it,
 * and every caller above passes the -1 up without touching the message. Nothing below main()
 * prints an error or exits. (train_config_parse alone returns 2 for a bad flag, 1 for --help:
 * those are answers, not failures.)
 *
 * What src/ calls reports failures its own way; each is turned into this model where it is met,
 * by one macro:
 *   CHECK_OPS    kernels/' ops table: non-zero, and the message in ops->last_error(ops)
 *   CHECK_COLL   the collectives: a shmddp_status_t, and shmddp_comm_last_error(comm)
 *   CHECK_CUDA   the CUDA runtime: a cudaError_t (src/device/ only; nothing else calls CUDA)
 *   MPI_CHECK    MPI: an error code (src/world/inter.h, beside the layer that calls MPI)
 * The macros expect `err` and `errlen` in scope. The model's hooks (model.h) are callbacks with
 * no message buffer: a failing hook keeps its message, and its owner (src/parallel/ddp.c) puts
 * it in front of the model's or returns it at the end of the step. */
#ifndef SRC_CHECK_H
#define SRC_CHECK_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/* Writes the message (printf format) into err and returns -1: `return check_fail(err, errlen,
 * "...", ...);`. */
static inline int check_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline int check_fail(char *err, size_t errlen, const char *fmt, ...)
{
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return -1;
}

/* Context in front of the message a failed call wrote: "WHAT: <its message>"; returns -1. */
static inline int check_prefix(char *err, size_t errlen, const char *what)
{
  if (err && errlen) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", err);
    snprintf(err, errlen, "%s: %s", what, msg);
  }
  return -1;
}

/* A call that follows this model failed: pass the -1 up (its message is already written). */
#define CHECK(call)                                                                                \
  do {                                                                                             \
    if ((call) != 0) return -1;                                                                    \
  } while (0)

/* An op of an ops table (kernels/ops.h) failed: "WHAT failed: <the backend's message>". */
#define CHECK_OPS(ops, call, what)                                                                 \
  do {                                                                                             \
    if ((call) != 0)                                                                               \
      return check_fail(err, errlen, "%s failed: %s", (what), (ops)->last_error(ops));             \
  } while (0)

/* A collective failed: "WHAT: <the communicator's last error>". */
#define CHECK_COLL(comm, call, what)                                                               \
  do {                                                                                             \
    if ((call) != SHMDDP_OK)                                                                       \
      return check_fail(err, errlen, "%s: %s", (what), shmddp_comm_last_error(comm));              \
  } while (0)

/* A CUDA runtime call failed: "<the call>: <CUDA's message>" (after <cuda_runtime_api.h>). */
#define CHECK_CUDA(call)                                                                       \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess)                                                                     \
      return check_fail(err, errlen, "%s: %s", #call, cudaGetErrorString(e_));                 \
  } while (0)

#endif
