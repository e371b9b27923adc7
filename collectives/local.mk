# collectives/: the public API (argument checks, dispatch) and the host algorithms; the
# reductions they use in collectives/reduce/.
include collectives/reduce/local.mk
libshmddp_core_la_SOURCES += \
	collectives/names.c \
	collectives/comm.c collectives/comm.h \
	collectives/api.c collectives/api.h collectives/launch.c collectives/join.c collectives/device.h \
	collectives/host_direct.c collectives/host_ring.c collectives/host.h \
	collectives/coloc.c collectives/coloc.h collectives/coloc_jobs.c collectives/coloc_jobs.h \
	collectives/fdpass.c collectives/fdpass.h \
	collectives/devmem.c collectives/devmem_import.c collectives/devmem.h collectives/devmem_impl.h
