/* ops_module.h — the CUDA ops module (kernels/ops_cuda_module.h: the CUDA backend with cuBLAS,
 * cuBLASLt and cuDNN), loaded the first time a GPU ops table is made. Used by device_ops.c; the
 * pieces below ops_module_path are its steps, declared for the tests. */
#ifndef SRC_DEVICE_OPS_MODULE_H
#define SRC_DEVICE_OPS_MODULE_H

#include <stddef.h>

#include "kernels/ops_cuda_module.h"

#define OPS_MODULE_PATH_MAX 4096 /* bytes of a candidate's path */

/* The module's table, loaded by the first call (any thread; it touches no GPU, so it may come
 * before the ranks are forked). NULL with a message that says what to do when it cannot be had:
 * a build without the CUDA backend, the module not found, a library it needs missing (which one,
 * and what to install), a module of another build. A failure is final: later calls give the
 * same message. */
const ops_cuda_module_t *ops_module_get(char *err, size_t errlen);
/* The table once ops_module_get has loaded it (every GPU ops table comes from it), else NULL. */
const ops_cuda_module_t *ops_module_loaded(void);
/* The file it was loaded from ("" before). */
const char *ops_module_path(void);

/* The relative path from the directory `from` to the directory `to`, both absolute (".." and "."
 * components are taken as names, not resolved): "../lib/shmddp" from /usr/bin to
 * /usr/lib/shmddp, "." for the same directory. 0, or -1 when a path is not absolute or buf (len
 * bytes) is too small. */
int ops_module_relpath(const char *from, const char *to, char *buf, size_t len);

/* The files to try, in order, for a program whose executable lies in the directory exe_dir: the
 * build tree's module for a program at the tree's top and for one a folder below (tests/, dev/);
 * the installed one, found from exe_dir by the relative path from bindir to pkglibdir (so an
 * installed program finds its own prefix's, moved or staged under DESTDIR too); pkglibdir's
 * itself. At most max paths; the count (a path that does not fit is left out). */
int ops_module_candidates(const char *exe_dir, const char *bindir, const char *pkglibdir,
                          char (*paths)[OPS_MODULE_PATH_MAX], int max);

/* Loads the module at path and checks that it is of this build (build: SHMDDP_BUILD_VERSION):
 * 0 with *handle (dlopen's) and *table, or -1 with the message (for a library the module needs
 * and the dynamic linker cannot find: which one, and what to install). */
int ops_module_open(const char *path, const char *build, void **handle,
                    const ops_cuda_module_t **table, char *err, size_t errlen);

#endif
