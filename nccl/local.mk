# nccl/: NCCL's C interface served by shmddp (CUDA build only).
# libshmddp_nccl_core.la (not installed) holds the front end; the tests link it with
# libshmddp_core.la. libshmddp-nccl.la is what is installed: libshmddp-nccl.so.0 with the code of
# both and only the nccl* entry points exported (nccl/libshmddp-nccl.map), plus a libnccl.so.2
# link to it in $(libdir)/shmddp-nccl/ for clients that load NCCL by name.
NCCL_SRCS = nccl/internal.h nccl/map.c nccl/comm.c nccl/coll.c nccl/group.c nccl/stubs.c
EXTRA_DIST += nccl/exports.txt nccl/libshmddp-nccl.map
if HAVE_CUDA
include_HEADERS += include/shmddp_nccl.h
noinst_LTLIBRARIES += libshmddp_nccl_core.la
libshmddp_nccl_core_la_SOURCES = $(NCCL_SRCS)
lib_LTLIBRARIES += libshmddp-nccl.la
libshmddp_nccl_la_SOURCES =
libshmddp_nccl_la_LIBADD = libshmddp_nccl_core.la libshmddp_core.la $(NUMA_LIBS) $(CUDA_RT_LIBS) -lm
libshmddp_nccl_la_LDFLAGS = -version-info 0:0:0 -no-undefined \
	-Wl,--version-script=$(srcdir)/nccl/libshmddp-nccl.map
EXTRA_libshmddp_nccl_la_DEPENDENCIES = nccl/libshmddp-nccl.map
NCCL_LINK = libnccl.so.2
else
EXTRA_DIST += $(NCCL_SRCS) include/shmddp_nccl.h
endif

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
