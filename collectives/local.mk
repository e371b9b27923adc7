# collectives/: the communicator and the public API (argument checks, dispatch), by transport in
# folders: host/ (host buffers through the segment), coloc/ (ranks that share a GPU: the protocol
# and the jobs of its kernel), devmem/ (sharing user device buffers between processes); the
# reductions they use in collectives/reduce/. The CUDA transport (cuda/) is in cuda.mk.
include collectives/reduce/local.mk
libshmddp_core_la_SOURCES += \
	collectives/names.c \
	collectives/comm.c collectives/comm.h \
	collectives/api.c collectives/api.h collectives/launch.c collectives/launch.h \
	collectives/join.c collectives/device.h \
	collectives/host/host_direct.c collectives/host/host_ring.c collectives/host/host.h \
	collectives/coloc/coloc.c collectives/coloc/coloc.h \
	collectives/coloc/coloc_jobs.c collectives/coloc/coloc_jobs.h \
	collectives/devmem/devmem.c collectives/devmem/devmem_import.c \
	collectives/devmem/devmem.h collectives/devmem/devmem_impl.h
