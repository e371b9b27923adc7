# src/train/: the training loop and its two engines (DDP, DataParallel), the run's settings as
# the loop reads them, the batches' way to the device, the checkpoint file, the training state
# and the run's record saved in it, metrics -> libtrainer.a.
noinst_LIBRARIES += libtrainer.a
libtrainer_a_CFLAGS = $(AM_CFLAGS) $(PNG_CFLAGS)
libtrainer_a_SOURCES = \
	src/train/train_config.c src/train/train_config.h src/train/job.h \
	src/train/loop.c src/train/loop.h src/train/loop_ddp.c src/train/loop_ddp.h \
	src/train/loop_dp.c src/train/loop_dp.h \
	src/train/batch_io.c src/train/batch_io.h \
	src/train/ckpt_state.c src/train/ckpt_state.h \
	src/train/ckpt_file.c src/train/ckpt_file.h src/train/ckpt_run.c src/train/ckpt_run.h \
	src/train/metrics.c src/train/metrics.h
