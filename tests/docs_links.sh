#!/bin/sh
# The pages a newcomer reads name only what exists. In README.md and docs/*.md:
#  - every relative link leads to a file or folder of the source tree, and a link with an anchor
#    (page.md#heading) to a heading of that page (GitHub's anchors: lower case, punctuation
#    dropped, spaces as hyphens);
#  - every bench/, tests/ or tools/ path written in backticks or in a code block exists: in the
#    source tree, in the build tree (a built program such as tools/doctor), or as the source of
#    a program of this tree (tests/check_join_cuda: tests/check_join_cuda.c); a path with * is a
#    pattern, which at least one file must match;
#  - every page of docs/ is linked from README.md.
set -u
src=${srcdir:-.}
build=${top_builddir:-.}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

# The links, the checked paths and the headings of one page, one per line:
#   link LINE TARGET / path LINE PATH / head SLUG
# Outside code blocks a paragraph, a list item or a table row is read whole (a code span may
# wrap a line); code spans are taken out before links are looked for.
scan() {
  awk '
    function slug(h,   s) {
      s = tolower(h)
      gsub(/[^a-z0-9 _-]/, "", s)
      gsub(/ /, "-", s)
      return s
    }
    function paths(text, line,   n, i, t, w) {
      n = split(text, w, /[ \t|,;()"]+/)
      for (i = 1; i <= n; i++) {
        t = w[i]
        sub(/^\.\//, "", t)
        sub(/[.:]+$/, "", t)
        if (t ~ /^(bench|tests|tools)\//) print "path", line, t
      }
    }
    function flush(   text, rest, span, tgt) {
      if (para == "") return
      text = para
      rest = ""
      while (match(text, /`[^`]+`/)) {
        span = substr(text, RSTART + 1, RLENGTH - 2)
        paths(span, pline)
        rest = rest substr(text, 1, RSTART - 1) " "
        text = substr(text, RSTART + RLENGTH)
      }
      rest = rest text
      while (match(rest, /\]\([^)]*\)/)) {
        tgt = substr(rest, RSTART + 2, RLENGTH - 3)
        if (tgt !~ /^[a-z]+:/) print "link", pline, tgt
        rest = substr(rest, RSTART + RLENGTH)
      }
      para = ""
    }
    /^[ \t]*```/ { flush(); code = !code; next }
    code { paths($0, NR); next }
    /^#+ / {
      flush()
      h = $0
      sub(/^#+ /, "", h)
      s = slug(h)
      if (s in seen) { seen[s]++; s = s "-" seen[s] } else seen[s] = 0
      print "head", 0, s
      next
    }
    /^[ \t]*$/ { flush(); next }
    /^[ \t]*([-*+]|[0-9]+\.) |^\|/ { flush() }
    { if (para == "") pline = NR; para = para " " $0 }
    END { flush() }
  ' "$1"
}

exists() { # exists PATH: in the source or build tree, as a program's source, or matching a pattern
  case $1 in
    *'*'*)
      # shellcheck disable=SC2086
      for f in "$src"/$1 "$build"/$1; do [ -e "$f" ] && return 0; done
      return 1 ;;
  esac
  for f in "$src/$1" "$build/$1" "$src/$1.c" "$src/$1.cu"; do [ -e "$f" ] && return 0; done
  return 1
}

pages="README.md"
for f in "$src"/docs/*.md; do
  [ -e "$f" ] && pages="$pages docs/${f##*/}"
done
nlinks=0
npaths=0
for page in $pages; do
  scan "$src/$page" > "$tmp/scan" || { bad "$page: could not be read"; continue; }
  dir=$(dirname "$page")
  while read -r kind line what; do
    case $kind in
      link)
        nlinks=$((nlinks + 1))
        file=${what%%#*}
        anchor=""
        case $what in *'#'*) anchor=${what#*#} ;; esac
        if [ -z "$file" ]; then
          target=$page
        elif [ "$dir" = . ]; then
          target=$file
        else
          target=$dir/$file
        fi
        if [ ! -e "$src/$target" ]; then
          bad "$page:$line: link to $what: no file $target"
          continue
        fi
        [ "$page" != README.md ] || echo "$target" >> "$tmp/readme_links"
        if [ -n "$anchor" ]; then
          case $target in
            *.md)
              scan "$src/$target" | awk -v a="$anchor" '$1 == "head" && $3 == a { found = 1 } END { exit !found }' ||
                bad "$page:$line: link to $what: $target has no heading #$anchor" ;;
          esac
        fi ;;
      path)
        npaths=$((npaths + 1))
        exists "$what" || bad "$page:$line: \`$what\` names no file of the tree" ;;
    esac
  done < "$tmp/scan"
done

# Every page of docs/ is linked from the README (a page nothing links to is not read).
for page in $pages; do
  case $page in
    docs/*)
      grep -qx "$page" "$tmp/readme_links" 2>/dev/null || bad "README.md links to no $page" ;;
  esac
done

if [ "$fails" -ne 0 ]; then
  echo "$fails problem(s) in README.md and docs/"
  exit 1
fi
echo "ok: $(echo "$pages" | wc -w) pages: $nlinks links and $npaths paths lead to what they name"
