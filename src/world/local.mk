# src/world/: every rank of a job as the DDP engine sees it -> libworld.a (one machine's shmddp
# group) and, with MPI, libworld_mpi.a (shmddp inside nodes, MPI between them). Only programs
# that run across machines link libworld_mpi.a and MPI.
noinst_LIBRARIES += libworld.a
libworld_a_SOURCES = src/world/world.c src/world/world.h
if HAVE_MPI
noinst_LIBRARIES += libworld_mpi.a
libworld_mpi_a_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
libworld_mpi_a_SOURCES = \
	src/world/world_mpi.c src/world/world_mpi.h \
	src/world/inter.c src/world/inter.h
endif
