# kernels/: the trainer operations (folded in the next step).
