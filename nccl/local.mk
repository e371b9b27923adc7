# nccl/: NCCL's C interface served by shmddp.
# libshmddp_nccl_core.la (not installed) holds the front end; the tests link it with
# libshmddp_core.la, in every build (a CPU-only build serves host-only communicators, which is
# how CI runs the conformance suite; the tests are registered in tests/local.mk). The CUDA build
# installs libshmddp-nccl.la: libshmddp-nccl.so.0 with the code of both and only the
# nccl*/pnccl* entry points exported (nccl/libshmddp-nccl.map), a libnccl.so.2 link to it in
# $(libdir)/shmddp-nccl/ for clients that load NCCL by name, and shmddp-nccl-run, which runs a
# command with the library preloaded.
NCCL_SRCS = nccl/internal.h nccl/map.c nccl/dev.c nccl/check.c nccl/init.c nccl/xlate.c \
	nccl/comm.c nccl/split.c nccl/shrink.c nccl/grow.c nccl/window.c nccl/exec.c \
	nccl/simulate.c nccl/queue.c nccl/api_comm.c nccl/api_coll.c nccl/api_mem.c \
	nccl/api_suspend.c nccl/stubs.c
EXTRA_DIST += nccl/exports.txt nccl/libshmddp-nccl.map nccl/shmddp-nccl-run.in
noinst_LTLIBRARIES += libshmddp_nccl_core.la
libshmddp_nccl_core_la_SOURCES = $(NCCL_SRCS)
if HAVE_CUDA
include_HEADERS += include/shmddp_nccl.h
lib_LTLIBRARIES += libshmddp-nccl.la
libshmddp_nccl_la_SOURCES =
libshmddp_nccl_la_LIBADD = libshmddp_nccl_core.la libshmddp_core.la $(NUMA_LIBS) $(CUDA_RT_LIBS) -lm
libshmddp_nccl_la_LDFLAGS = -version-info 0:0:0 -no-undefined \
	-Wl,--version-script=$(srcdir)/nccl/libshmddp-nccl.map
EXTRA_libshmddp_nccl_la_DEPENDENCIES = nccl/libshmddp-nccl.map
NCCL_LINK = libnccl.so.2
NCCL_RUN_SCRIPT = shmddp-nccl-run
else
EXTRA_DIST += include/shmddp_nccl.h
NCCL_RUN_SCRIPT =
endif
CLEANFILES += shmddp-nccl-run

# The wrapper knows where the library is installed, its version (as every program's), and
# where an MPS daemon listens when no variable says otherwise.
shmddp-nccl-run: $(srcdir)/nccl/shmddp-nccl-run.in Makefile build_version.h
	$(AM_V_GEN)v=`sed -n 's/^#define SHMDDP_BUILD_VERSION "\(.*\)"$$/\1/p' build_version.h`; \
	sed -e 's|@libdir[@]|$(libdir)|g' -e "s|@version[@]|$$v|g" -e 's|@mps_pipe_dir[@]|/tmp/nvidia-mps|g' \
	  $(srcdir)/nccl/shmddp-nccl-run.in > $@.tmp && chmod +x $@.tmp && mv $@.tmp $@

# The libnccl.so.2 name (empty NCCL_LINK: nothing to do in a CPU-only build).
install-exec-hook: install-nccl-link
uninstall-hook: uninstall-nccl-link
.PHONY: install-nccl-link uninstall-nccl-link
install-nccl-link:
	test -z '$(NCCL_LINK)' || { $(MKDIR_P) '$(DESTDIR)$(libdir)/shmddp-nccl' && \
	  cd '$(DESTDIR)$(libdir)/shmddp-nccl' && rm -f $(NCCL_LINK) && \
	  $(LN_S) ../libshmddp-nccl.so.0 $(NCCL_LINK); }
uninstall-nccl-link:
	test -z '$(NCCL_LINK)' || { rm -f '$(DESTDIR)$(libdir)/shmddp-nccl/$(NCCL_LINK)' && \
	  rmdir '$(DESTDIR)$(libdir)/shmddp-nccl' 2>/dev/null; true; }
