# src/parallel/: the data-parallel engines -> libparallel.a: DDP (ddp.c: the whole step, with
# gradient buckets all-reduced during backward and SyncBN exchanges, eagerly or as a replayed
# CUDA graph) and DataParallel (one process driving every device).
noinst_LIBRARIES += libparallel.a
libparallel_a_SOURCES = \
	src/parallel/ddp.c src/parallel/ddp.h \
	src/parallel/dp.c src/parallel/dp.h
