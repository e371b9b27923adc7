# kernels/ops.mk: the trainer's operations (CPU reference, and CUDA with the CUDA build).
