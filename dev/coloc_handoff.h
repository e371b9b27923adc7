/* coloc_handoff.h — the one kernel of dev/coloc_handoff.c (dev/coloc_handoff_kernel.cu): a
 * stand-in for a co-located collective's work, reading one value from every rank's input and
 * writing their sum (plus the call's number) into every output it is given. Plain C types: C
 * and CUDA include it. */
#ifndef DEV_COLOC_HANDOFF_H
#define DEV_COLOC_HANDOFF_H

#define HANDOFF_MAXR 8

typedef struct {
  const int *in[HANDOFF_MAXR];
  int *out[HANDOFF_MAXR];
  int nin, nout;
  int call;
} handoff_args_t;

#ifdef __cplusplus
extern "C" {
#endif
/* Launch it on stream (a cudaStream_t); 0 or the launch's cudaError_t. */
int handoff_launch(const handoff_args_t *a, void *stream);
#ifdef __cplusplus
}
#endif

#endif
