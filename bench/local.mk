# bench/: benchmark scripts and recorded results.
EXTRA_DIST += bench/results
