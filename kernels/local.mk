# kernels/: reductions used by the collectives (CPU reference here; CUDA with the CUDA build).
libshmddp_core_la_SOURCES += \
	kernels/half.h \
	kernels/reduce_cpu.c kernels/reduce_cpu.h
