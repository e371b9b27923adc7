# tests/cuda.mk: Check suites of the CUDA collectives (skip without a GPU).
