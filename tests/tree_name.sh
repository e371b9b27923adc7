#!/bin/sh
# bench/tree_name.sh names the tree a record ran on by its content: HEAD where the working tree is
# HEAD's; otherwise the tree object the files would be committed as, the one `git log --format=%T`
# shows for the commit that holds them, also when the copy's .git is stale (HEAD left behind, as on
# the GPU machine's copy of a working tree). Ignored files do not count; outside a checkout:
# "unknown". In a scratch repository; SKIP (77) without git.
set -u
src=${srcdir:-.}
command -v git > /dev/null 2>&1 || { echo "SKIP: no git"; exit 77; }
name="$src/bench/tree_name.sh"
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
fail=0
check() { # WHAT GOT WANT
  if [ "$2" = "$3" ]; then echo "ok: $1: $2"; else echo "FAIL: $1: got '$2', want '$3'"; fail=1; fi
}
g() { git -C "$dir/r" -c user.name=t -c user.email=t@t -c commit.gpgsign=false "$@"; }
mkdir -p "$dir/r/sub" && g init -q || exit 1
printf 'one\n' > "$dir/r/a"
printf 'ignored.*\n' > "$dir/r/.gitignore"
g add -A && g commit -q -m first || exit 1
first=$(g rev-parse --short=12 HEAD)
check "clean checkout" "$(sh "$name" "$dir/r")" "$first"
check "from a subfolder" "$(sh "$name" "$dir/r/sub")" "$first"
printf 'build output\n' > "$dir/r/ignored.o"
check "an ignored file" "$(sh "$name" "$dir/r")" "$first"
# the next commit's files, HEAD still at the first: the stale copy
printf 'two\n' > "$dir/r/a"
printf 'new\n' > "$dir/r/sub/b"
stale=$(sh "$name" "$dir/r")
g add -A && g commit -q -m second || exit 1
second_tree=$(g rev-parse 'HEAD^{tree}' | cut -c1-12)
second=$(g rev-parse --short HEAD)
g branch kept
check "changed and untracked files, HEAD behind" "$stale" "tree $second_tree (HEAD $first with changes)"
check "the same files committed" "$(sh "$name" "$dir/r")" "$(g rev-parse --short=12 HEAD)"
g reset -q --soft "$first"
check "HEAD moved back, files kept (a copy with a stale .git)" "$(sh "$name" "$dir/r")" \
  "tree $second_tree (HEAD $first with changes)"
check "git log maps the tree to its commit" \
  "$(g log --all --format='%h %T' | awk -v t="$second_tree" 'index($2, t) == 1 {print $1}')" \
  "$second"
g status --porcelain > "$dir/before"
sh "$name" "$dir/r" > /dev/null
g status --porcelain > "$dir/after"
check "the checkout's index untouched" "$(cmp -s "$dir/before" "$dir/after" && echo same)" same
mkdir "$dir/plain"
check "not a checkout" "$(sh "$name" "$dir/plain")" unknown
exit $fail
