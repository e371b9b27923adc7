/* ops_module_fake.c — a stand-in for the CUDA ops module of another build, for
 * tests/check_ops_module: it exports the entry point, and its table names another build (no
 * function in it is ever called). Built by tests/local.mk as tests/fake_ops/other-build.so. */
#include "kernels/ops_cuda_module.h"

static const ops_cuda_module_t table = {.build = "0.0.0 (another build)", .ops_size = sizeof(ops_t)};

const ops_cuda_module_t *ops_cuda_module(void) { return &table; }
