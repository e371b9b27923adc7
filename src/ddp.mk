# src/ddp.mk: the data-parallel engine (gradient buckets, SyncBN exchange) -> libddp.a
noinst_LIBRARIES += libddp.a
libddp_a_SOURCES = src/ddp.c src/ddp.h src/model.h src/checkpoint.c src/checkpoint.h
