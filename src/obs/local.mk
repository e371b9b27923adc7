# src/obs/: what a run shows — the timeline, the per-step log, progress lines, the result line
# and summary.json, every rank's ledger and GPU use (NVML), the last lines (the model and the
# commands that use it) -> libobs.a.
noinst_LIBRARIES += libobs.a
libobs_a_SOURCES = \
	src/obs/timeline.c src/obs/timeline.h \
	src/obs/report_log.c src/obs/report_log.h \
	src/obs/progress.c src/obs/progress.h \
	src/obs/summary.c src/obs/summary.h \
	src/obs/run_summary.c src/obs/run_summary.h \
	src/obs/nvml_dl.c src/obs/nvml_dl.h \
	src/obs/timeline_dev.c src/obs/timeline_dev.h \
	src/obs/outfile.c src/obs/outfile.h \
	src/obs/shquote.c src/obs/shquote.h \
	src/obs/run_end.c src/obs/run_end.h \
	src/obs/json_out.c src/obs/json_out.h
