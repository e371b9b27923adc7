# src/data/: datasets (procedural shapes, PNG folders), augmentation, the distributed sampler
# and the loader threads -> libdata.a.
noinst_LIBRARIES += libdata.a
libdata_a_CFLAGS = $(AM_CFLAGS) $(PNG_CFLAGS)
libdata_a_SOURCES = \
	src/data/data.c src/data/data.h src/data/data_rng.h \
	src/data/data_synth.c src/data/data_png.c \
	src/data/augment.c src/data/augment.h \
	src/data/sampler.c src/data/sampler.h \
	src/data/loader.c src/data/loader.h
