# src/: the trainer. Until it exists, shmddp-train runs a collective self-test across ranks.
bin_PROGRAMS += shmddp-train
shmddp_train_SOURCES = src/main.c
shmddp_train_LDADD = $(SHMDDP_LIBS)
