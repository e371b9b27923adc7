# shm/: segment lifecycle, launcher and supervisor, the wake word and the waits over it, abort,
# NUMA placement.
# They go into libshmddp_core.la (Makefile.am), the code of the installed libshmddp.
libshmddp_core_la_SOURCES += \
	shm/segment.c shm/segment.h \
	shm/wake.c shm/wake.h shm/wait.c shm/wait.h \
	shm/abort.c shm/abort.h \
	shm/launcher.c shm/launcher.h \
	shm/numa.c shm/numa.h \
	shm/rendezvous.c shm/rendezvous.h shm/liveness.c shm/liveness.h \
	shm/blake2s.c shm/blake2s.h shm/env.c shm/env.h shm/shmfile.c shm/shmfile.h \
	shm/timeutil.h shm/check.h
# The socket mesh that passes descriptors between processes, with the peer's credentials checked
# (the device-memory sharing of collectives/devmem/ sends its buffers' descriptors through it).
libshmddp_core_la_SOURCES += shm/fdpass.c shm/fdpass.h
