# bench/: benchmark scripts and recorded results.
EXTRA_DIST += bench/run_host_collectives.sh bench/results
