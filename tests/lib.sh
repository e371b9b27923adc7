# tests/lib.sh — the start the shell tests share, sourced first (after `set -u`): $tmp, a private
# folder removed when the script exits (a script with more to remove sets its own EXIT trap that
# removes $tmp too), and check NAME CONDITION, which evaluates CONDITION, prints "ok: NAME" or
# "FAIL: NAME" and sets fail=1 on a failure; such a script ends with `exit $fail`.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }
