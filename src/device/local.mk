# src/device/: memory per device with its ledger, and the device primitives (select, copies,
# events, sums) -> libdevice.a.
noinst_LIBRARIES += libdevice.a
libdevice_a_SOURCES = \
	src/device/arena.c src/device/arena.h \
	src/device/dp_dev.c src/device/dp_dev.h
