# tests/lib.sh — the start the shell tests share, sourced first (after `set -u`): $tmp, a private
# folder removed when the script exits (a script with more to remove sets its own EXIT trap that
# removes $tmp too), and check NAME CONDITION, which evaluates CONDITION, prints "ok: NAME" or
# "FAIL: NAME" and on a failure sets fail=1 and returns 1 (so `check ... || cat LOG` shows why);
# such a script ends with `exit $fail`.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; return 1; fi; }

# tail_logs N [FILE...]: each FILE's name and last N lines (default: the logs in $tmp), what a
# failing script shows.
tail_logs() {
  _n=$1
  shift
  [ $# -gt 0 ] || set -- "$tmp"/*.log
  for _f; do
    echo "== $_f"
    tail -n "$_n" "$_f"
  done
}

# torch_python CODE: the first of $PYTHON, python3 on PATH and /usr/bin/python3 (where apt
# installs python3-torch when PATH starts with another python3, e.g. pyenv's) that runs CODE,
# which imports torch and prints its version: that python in $py3, what it printed in $v.
# Status 1 when none does.
torch_python() {
  for py3 in ${PYTHON:-} python3 /usr/bin/python3; do
    v=$("$py3" -c "$1" 2> /dev/null) && return 0
  done
  py3=""
  return 1
}
