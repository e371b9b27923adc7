# src/dp.mk (included by src/local.mk): DataParallel mode, one process driving N devices
# (engine, device primitives, the training loop of `train --mode dp`) -> libdp.a.
noinst_LIBRARIES += libdp.a
libdp_a_CFLAGS = $(AM_CFLAGS) $(PNG_CFLAGS)
libdp_a_SOURCES = src/dp.c src/dp.h src/dp_dev.c src/dp_dev.h src/dp_train.c src/dp_train.h

# tools/compare (installed as shmddp-compare): ./train in several modes on the same cases -> a
# table and SVG charts.
bin_PROGRAMS += shmddp-compare
shmddp_compare_SOURCES = tools/compare.c tools/compare.h tools/compare_svg.c
shmddp_compare_LDADD = -lm
