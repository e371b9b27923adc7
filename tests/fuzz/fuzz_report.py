#!/usr/bin/env python3
"""fuzz_report.py — a fuzzer for the files tools/report reads: a run folder's log.jsonl,
summary.json and timeline-rank*.json, and the --account file.

  fuzz_report.py --replay DIR            every kept input of DIR, once (CI: tests/report_fuzz.sh)
  fuzz_report.py [--seed S] [--runs N | --seconds T] DIR
                                         mutations of DIR's inputs; a failing one is written to
                                         tests/fuzz/crashes/report-<sha1>.json, exit status 1

An input is a JSON object {file name: content}, each content a string whose code points 0-255
are the file's bytes (so any bytes can be kept). The contract, for any input: the report either
writes its page or refuses with its own message (SystemExit "shmddp-report: ..."), never an
uncaught exception; the page is UTF-8 and holds only the tags and attributes the report writes
(no script, no event handler, no javascript: URL, no comment); the merged trace is strict JSON.

Mutations know the formats: a JSON value somewhere in a file is replaced by a hostile one
(markup, bytes that are not UTF-8, NaN, huge or negative numbers, wrong types, deep nesting), a
key is dropped or a list entry repeated, or bytes are flipped, inserted or cut."""
import contextlib
import glob
import hashlib
import html.parser
import importlib.machinery
import importlib.util
import io
import json
import os
import random
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPORT = os.path.join(os.environ.get("srcdir", ROOT), "tools", "report")

TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "b", "section",
        "table", "tr", "th", "td", "div", "svg", "line", "polyline", "rect", "circle", "text"}
ATTRS = {"lang", "charset", "id", "class", "xmlns", "width", "height", "viewbox", "font-family",
         "font-size", "x", "y", "x1", "x2", "y1", "y2", "cx", "cy", "r", "fill", "stroke",
         "stroke-width", "stroke-dasharray", "points", "text-anchor", "transform"}
HOSTILE = ["<script>alert(1)</script>", "\"><svg onload=alert(1)>", "'><img src=x onerror=1>",
           "</text></svg><script>x</script>", "javascript:alert(1)", "<!--", "]]>", "\x00\x1b",
           "\ud800", "\udcff", "", "step", "X", "a" * 5000, float("nan"), float("inf"),
           -float("inf"), -1, 0, 1, 2 ** 53 + 1, 2 ** 64, -2 ** 63, 1e308, -1e308, 5e-324, True,
           False, None, [], {}, [1, 2, 3], {"step": 1}, [[[[[[[[[[[]]]]]]]]]]]]


class Page(html.parser.HTMLParser):
    def handle_starttag(self, tag, attrs):
        if tag not in TAGS:
            raise AssertionError("a <%s> element" % tag)
        for k, v in attrs:
            if k not in ATTRS:
                raise AssertionError("a %s attribute on <%s>" % (k, tag))
            if "javascript" in (v or "").lower():
                raise AssertionError("%s=%r" % (k, v))

    def handle_comment(self, data):
        raise AssertionError("a comment %r" % data[:40])

    def unknown_decl(self, data):
        raise AssertionError("a declaration %r" % data[:40])


def load_report():
    loader = importlib.machinery.SourceFileLoader("shmddp_report", REPORT)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


def run_one(report, files, scratch):
    """Runs the report on files; None when the contract holds, else what broke it."""
    run = os.path.join(scratch, "run")
    shutil.rmtree(run, ignore_errors=True)
    os.makedirs(run)
    for name, content in files.items():
        if name != "account.json":
            with open(os.path.join(run, name), "wb") as f:
                f.write(content.encode("latin-1"))
    out, merged = os.path.join(scratch, "report.html"), os.path.join(scratch, "merged.json")
    argv = ["shmddp-report", run, "-o", out, "--merge-timeline", merged]
    if "account.json" in files:
        with open(os.path.join(scratch, "account.json"), "wb") as f:
            f.write(files["account.json"].encode("latin-1"))
        argv += ["--account", os.path.join(scratch, "account.json")]
    for p in (out, merged):
        if os.path.exists(p):
            os.unlink(p)
    saved = sys.argv
    sys.argv = argv
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            report.main()
    except SystemExit as e:
        if e.code not in (None, 0) and not (isinstance(e.code, str)
                                            and e.code.startswith("shmddp-report: ")):
            return "exit %r" % (e.code,)
        if e.code not in (None, 0):
            return None  # refused, with its message
    except Exception as e:  # the contract: nothing escapes but the report's own refusals
        return "%s: %s" % (type(e).__name__, str(e)[:200])
    finally:
        sys.argv = saved
    try:
        with open(out, "rb") as f:
            p = Page()
            p.feed(f.read().decode("utf-8"))
            p.close()
        if os.path.exists(merged):
            with open(merged, "rb") as f:
                json.loads(f.read().decode("utf-8"))
    except (AssertionError, ValueError) as e:
        return "the page or the trace: %s" % str(e)[:200]
    return None


def mutate_value(v, rnd, depth=0):
    """v with one node replaced, dropped or repeated."""
    if isinstance(v, dict) and v and rnd.random() < 0.8 and depth < 6:
        k = rnd.choice(list(v))
        v = dict(v)
        r = rnd.random()
        if r < 0.1:
            del v[k]
        elif r < 0.2:
            v[rnd.choice(HOSTILE[:8])] = v[k]
        else:
            v[k] = mutate_value(v[k], rnd, depth + 1)
        return v
    if isinstance(v, list) and v and rnd.random() < 0.8 and depth < 6:
        i = rnd.randrange(len(v))
        v = list(v)
        r = rnd.random()
        if r < 0.1:
            v.insert(i, v[i])
        elif r < 0.15:
            del v[i]
        else:
            v[i] = mutate_value(v[i], rnd, depth + 1)
        return v
    return rnd.choice(HOSTILE)


def mutate_text(text, rnd):
    """A JSON (or JSON-lines) file with one value changed; else bytes flipped, inserted, cut."""
    lines = text.split("\n")
    r = rnd.random()
    if r < 0.75:
        i = rnd.randrange(len(lines))
        try:
            v = json.loads(lines[i]) if len(lines) > 1 else json.loads(text)
        except (ValueError, RecursionError):
            v = None
        if v is not None:
            new = json.dumps(mutate_value(v, rnd))
            if len(lines) > 1:
                lines[i] = new
                return "\n".join(lines)
            return new
    b = bytearray(text.encode("latin-1"))
    for _ in range(rnd.randint(1, 8)):
        op = rnd.random()
        at = rnd.randrange(len(b) + 1)
        if op < 0.4 and b:
            b[min(at, len(b) - 1)] = rnd.randrange(256)
        elif op < 0.7:
            b[at:at] = rnd.choice([b"\xff", b"\x00", b"<script>", b"\"", b"\n", b"[" * 50, b"}"])
        else:
            del b[at:at + rnd.randint(1, 64)]
    return b.decode("latin-1")


def mutate(files, rnd):
    files = dict(files)
    name = rnd.choice(list(files))
    files[name] = mutate_text(files[name], rnd)
    if rnd.random() < 0.05:  # a file gone, or one more timeline
        if rnd.random() < 0.5 and len(files) > 1:
            del files[rnd.choice([n for n in files if n != "log.jsonl"] or [name])]
        else:
            files["timeline-rank%d.json" % rnd.randrange(9)] = files[name]
    return files


def load_corpus(d):
    out = []
    for path in sorted(glob.glob(os.path.join(d, "*.json"))):
        with open(path) as f:
            out.append((os.path.basename(path), json.load(f)))
    return out


def save_crash(files, why):
    crashes = os.path.join(ROOT, "tests", "fuzz", "crashes")
    os.makedirs(crashes, exist_ok=True)
    data = json.dumps(files, sort_keys=True)
    path = os.path.join(crashes, "report-%s.json" % hashlib.sha1(data.encode()).hexdigest())
    with open(path, "w") as f:
        f.write(data)
    print("fuzz_report: %s\n  input kept in %s" % (why, path))


def main():
    args = sys.argv[1:]
    opts = {"--seed": "1", "--runs": "0", "--seconds": "0"}
    replay = False
    while args and args[0].startswith("--"):
        if args[0] == "--replay":
            replay = True
            args = args[1:]
        else:
            opts[args[0]] = args[1]
            args = args[2:]
    if len(args) != 1:
        sys.exit(__doc__)
    corpus = load_corpus(args[0])
    if not corpus:
        sys.exit("fuzz_report: no inputs (*.json) in %s" % args[0])
    report = load_report()
    sys.setrecursionlimit(10000)
    scratch = tempfile.mkdtemp(prefix="shmddp-fuzz-report-")
    failed = 0
    try:
        if replay:
            for name, files in corpus:
                why = run_one(report, files, scratch)
                if why:
                    print("fuzz_report: %s: %s" % (name, why))
                    failed += 1
            print("fuzz_report: %d inputs replayed, %d failed" % (len(corpus), failed))
            return 1 if failed else 0
        rnd = random.Random(int(opts["--seed"]))
        runs, seconds = int(opts["--runs"]), float(opts["--seconds"])
        t0, n = time.time(), 0
        while (runs and n < runs) or (seconds and time.time() - t0 < seconds):
            files = mutate(rnd.choice(corpus)[1], rnd)
            for _ in range(rnd.randint(0, 3)):
                files = mutate(files, rnd)
            why = run_one(report, files, scratch)
            n += 1
            if why:
                save_crash(files, why)
                return 1
        print("fuzz_report: %d mutated inputs, seed %s, all kept the contract" % (n, opts["--seed"]))
        return 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
