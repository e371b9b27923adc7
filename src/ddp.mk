# src/ddp.mk: the data-parallel engine (gradient buckets, SyncBN exchange) and checkpoints -> libddp.a
noinst_LIBRARIES += libddp.a
libddp_a_SOURCES = src/ddp.c src/ddp.h src/model.h src/checkpoint.c src/checkpoint.h
EXTRA_DIST += src/ddp_cuda.h
if HAVE_CUDA
libddp_a_SOURCES += src/ddp_cuda.c
endif
