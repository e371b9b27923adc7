#!/bin/sh
# bench/tree_name.sh — the name a record gives the tree it ran on, taken from the files themselves:
# the checkout's HEAD (12 hex digits) where the working tree is exactly HEAD's; else
# "tree T (HEAD H with changes)", T being the git tree object the working tree would be committed
# as (tracked and untracked files, not the ignored ones: a tracked file that .gitignore matched
# would be left out, and tests/gitignore.sh checks that none is), which
#   git log --all --format='%h %T' | grep T
# maps back to the commit that holds it. So a copy of a tree whose .git is stale (the GPU
# machine's copy of a working tree) is named by its content, not by the stale HEAD. "unknown"
# outside a git checkout or without git. Nothing in the checkout changes but git's object store
# (the blobs of changed files, as `git add` writes them; the index is a temporary one).
# usage: bench/tree_name.sh [DIR]   (default: the current directory)
cd "${1:-.}" 2> /dev/null || { echo unknown; exit 0; }
top=$(git rev-parse --show-toplevel 2> /dev/null) || { echo unknown; exit 0; }
head=$(git rev-parse --short=12 HEAD 2> /dev/null) || { echo unknown; exit 0; }
tmp=$(mktemp -d) || { echo "$head (tree unknown)"; exit 0; }
trap 'rm -rf "$tmp"' EXIT
if tree=$(cd "$top" && GIT_INDEX_FILE=$tmp/index git add -A . 2> /dev/null &&
  GIT_INDEX_FILE=$tmp/index git write-tree 2> /dev/null); then
  if [ "$tree" = "$(git rev-parse 'HEAD^{tree}' 2> /dev/null)" ]; then
    echo "$head"
  else
    echo "tree $(echo "$tree" | cut -c1-12) (HEAD $head with changes)"
  fi
else
  echo "$head (tree unknown)"
fi
