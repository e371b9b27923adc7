# src/parallel/: the data-parallel engines -> libparallel.a: DDP (gradient buckets all-reduced
# during backward, SyncBN exchanges; the step eagerly or as a replayed CUDA graph) and
# DataParallel (one process driving every device).
noinst_LIBRARIES += libparallel.a
libparallel_a_SOURCES = \
	src/parallel/ddp.c src/parallel/ddp.h \
	src/parallel/step_graph.c src/parallel/step_graph.h \
	src/parallel/dp.c src/parallel/dp.h
