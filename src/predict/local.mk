# src/predict/: shmddp-predict: a checkpoint's network on a folder of images (masks, overlays,
# scores) and its weights exported to safetensors for PyTorch. Above app/ and train/: it reads
# the trainer's checkpoints and its option table (src/app/options.c).
noinst_LIBRARIES += libpredict.a
libpredict_a_CFLAGS = $(AM_CFLAGS) $(PNG_CFLAGS)
libpredict_a_SOURCES = \
	src/predict/weights.c src/predict/weights.h \
	src/predict/predict.c src/predict/predict.h \
	src/predict/safetensors.c src/predict/safetensors.h \
	src/predict/png_write.c src/predict/png_write.h

bin_PROGRAMS += shmddp-predict
shmddp_predict_SOURCES = src/predict/main.c
shmddp_predict_LDADD = libpredict.a $(APP_LIBS) $(SHMDDP_LIBS) $(PNG_LIBS) $(ZLIB_LIBS)
EXTRA_shmddp_predict_DEPENDENCIES = $(OPS_MODULE)
