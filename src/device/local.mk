# src/device/: what runs on a device -> libdevice.a: memory with its ledger (arena), the device
# interface (device.h: devices, memory, streams, events, copies, graphs; the ops backend of each
# device and the flat f32 arithmetic of the optimizer), over the CUDA runtime in GPU builds and
# plain host code otherwise. The ops backends themselves are kernels/' (libkernels.a, linked
# after this archive; the CUDA one in the CUDA ops module, which ops_module.c loads).
# device_sum.c and device_comm.c need the shmddp library; the rest does not.
noinst_LIBRARIES += libdevice.a
# -O3 as kernels/ (the flat f32 arithmetic of the optimizer is a hot loop too).
libdevice_a_CFLAGS = $(AM_CFLAGS) -O3
libdevice_a_SOURCES = \
	src/device/arena.c src/device/arena.h src/device/plan.c src/device/plan.h \
	src/device/device.c src/device/device.h src/device/device_ops.c \
	src/device/ops_module.c src/device/ops_module.h \
	src/device/device_sum.c src/device/device_comm.c
# Where ops_module.c looks for the CUDA ops module: relative to the program, where `make install`
# puts it (from bindir to pkglibdir) or where the build tree has it; else pkglibdir itself.
libdevice_a_CPPFLAGS = $(AM_CPPFLAGS) -DSHMDDP_BINDIR='"$(bindir)"' \
	-DSHMDDP_PKGLIBDIR='"$(pkglibdir)"' -DSHMDDP_LT_OBJDIR='"$(LT_OBJDIR_NAME)"'
# Programs linking libdevice.a need $(CUDA_RT_LIBS) (empty without CUDA); the GPU backend is the
# CUDA ops module, which src/device/ops_module.c loads on first GPU use.
