#!/bin/sh
# The files tools/report reads (a run's log.jsonl, summary.json, timeline-rank*.json and the
# --account file) through tests/fuzz/fuzz_report.py: every kept input of tests/fuzz/regress_report
# once, then 300 mutations of them from a fixed seed (the same every run), each of which must
# keep the report's contract: its page or its own refusal, never an uncaught exception; only
# the report's own markup in the page; the merged trace strict JSON. Longer runs by hand:
# python3 tests/fuzz/fuzz_report.py --seconds 600 --seed N tests/fuzz/regress_report
# Skips (77) without python3.
set -u
command -v python3 > /dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
src=${srcdir:-.}
python3 "$src/tests/fuzz/fuzz_report.py" --replay "$src/tests/fuzz/regress_report" &&
  python3 "$src/tests/fuzz/fuzz_report.py" --seed 1 --runs 300 "$src/tests/fuzz/regress_report"
