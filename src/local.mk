# src/local.mk: the trainer (CLI, data, sampler, loader, metrics, training loop) -> libtrainer.a,
# and the `train` program, shmddp-train.
noinst_LIBRARIES += libtrainer.a
libtrainer_a_CFLAGS = $(AM_CFLAGS) $(PNG_CFLAGS)
libtrainer_a_SOURCES = \
	src/train_config.c src/train_config.h src/train_machine.c \
	src/data.c src/data.h src/data_rng.h src/data_synth.c src/data_png.c \
	src/augment.c src/augment.h \
	src/sampler.c src/sampler.h \
	src/loader.c src/loader.h \
	src/metrics.c src/metrics.h \
	src/train.c src/train.h src/train_job.c src/train_device.c src/train_device.h \
	src/train_ckpt.c src/train_ckpt.h src/step_graph.c src/step_graph.h \
	src/progress.c src/progress.h \
	src/report_log.c src/report_log.h \
	src/summary.c src/summary.h

bin_PROGRAMS += shmddp-train
shmddp_train_SOURCES = src/main.c
shmddp_train_LDADD = libdp.a libtrainer.a libddp.a libmodel.a $(SHMDDP_LIBS) $(PNG_LIBS) $(ZLIB_LIBS)

# DataParallel mode (libdp.a) and tools/compare.
include $(top_srcdir)/src/dp.mk
