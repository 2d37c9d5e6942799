"""A lit test format: one test per tests/corpus/torch-<release>/*.gir file.

The corpus files are real exports (scripts/regen-corpus.sh) and carry no RUN
lines, so instead of ShTest this format runs the same three checks on each:

1. `guard-ir-opt --emit=ir FILE` prints FILE byte for byte (printer and
   parser round-trip on real guard sets);
2. `guard-ir-opt --emit=llvm FILE` lowers every set without error and
   defines one check function per set;
3. `guard-ir-opt --stats FILE` succeeds and its per-kind counts add up to
   the number of `guard` lines of each set.

A failure names the file and the check, with the first lines of the diff or
the tool's stderr. One more test per release, `torch-<release>/corpus`, fails
when that release's corpus has fewer than six models. The text needs no
torch, so every release's corpus is tested whatever torch is installed. Nothing here hard-codes a guard count: the lead regenerates
the corpus as guard kinds are added.
"""

import difflib
import os
import re
import subprocess

import lit.formats.base
import lit.Test

MIN_MODELS = 6
TIMEOUT_S = 300


def _run(args):
    return subprocess.run(args, capture_output=True, timeout=TIMEOUT_S)


def _sets(text):
    """Per guard set: (name, number of `guard` lines), in file order."""
    sets = []
    for line in text.splitlines():
        m = re.match(r'guard_set "((?:[^"\\]|\\.)*)" \{', line)
        if m:
            sets.append([m.group(1), 0])
        elif line.startswith("  guard ") and sets:
            sets[-1][1] += 1
    return sets


class CorpusFormat(lit.formats.base.TestFormat):
    def __init__(self, corpus_dir, tool):
        self.corpus_dir = corpus_dir
        self.tool = tool

    def _releases(self):
        return sorted(d for d in os.listdir(self.corpus_dir)
                      if d.startswith("torch-") and os.path.isdir(os.path.join(self.corpus_dir, d)))

    @staticmethod
    def _files(release_dir):
        return sorted(f for f in os.listdir(release_dir) if f.endswith(".gir"))

    def getTestsInDirectory(self, testSuite, path_in_suite, litConfig, localConfig):
        for release in self._releases():
            release_dir = os.path.join(self.corpus_dir, release)
            yield lit.Test.Test(testSuite, path_in_suite + (release, "corpus"), localConfig,
                                file_path=release_dir)
            for name in self._files(release_dir):
                yield lit.Test.Test(testSuite, path_in_suite + (release, name), localConfig,
                                    file_path=os.path.join(release_dir, name))

    def execute(self, test, litConfig):
        path = test.getFilePath()
        if os.path.isdir(path):
            models = {f.split(".")[0] for f in self._files(path)}
            if len(models) < MIN_MODELS:
                return lit.Test.FAIL, (f"{path}: {len(models)} models {sorted(models)}, "
                                       f"expected at least {MIN_MODELS}")
            return lit.Test.PASS, ""
        with open(path, "rb") as f:
            original = f.read()
        problems = []

        r = _run([self.tool, "--emit=ir", path])
        if r.returncode != 0:
            problems.append(f"--emit=ir exited {r.returncode}:\n{r.stderr.decode()}")
        elif r.stdout != original:
            diff = difflib.unified_diff(
                original.decode(errors="replace").splitlines(),
                r.stdout.decode(errors="replace").splitlines(),
                path, "guard-ir-opt --emit=ir", lineterm="")
            problems.append("--emit=ir does not round-trip:\n"
                            + "\n".join(list(diff)[:40]))

        sets = _sets(original.decode())
        r = _run([self.tool, "--emit=llvm", path])
        if r.returncode != 0:
            problems.append(f"--emit=llvm exited {r.returncode}:\n{r.stderr.decode()}")
        else:
            defines = len(re.findall(rb"^define ", r.stdout, re.M))
            if defines < len(sets):
                problems.append(f"--emit=llvm defines {defines} functions for {len(sets)} sets")

        r = _run([self.tool, "--stats", "-o", os.devnull, path])
        if r.returncode != 0:
            problems.append(f"--stats exited {r.returncode}:\n{r.stderr.decode()}")
        else:
            problems += _check_stats(r.stderr.decode(), sets)

        if problems:
            return lit.Test.FAIL, f"{path}:\n" + "\n".join(problems)
        return lit.Test.PASS, ""


def _check_stats(stats, sets):
    """`guard set "N": G guards, ...` then `  <count> <kind>` lines per set."""
    got, problems = [], []
    for line in stats.splitlines():
        m = re.match(r'guard set "((?:[^"\\]|\\.)*)": (\d+) guards', line)
        if m:
            got.append([m.group(1), int(m.group(2)), 0])
            continue
        m = re.match(r"\s+(\d+) [a-z_]+$", line)
        if m and got:
            got[-1][2] += int(m.group(1))
    if [(n, g) for n, g, _ in got] != [tuple(s) for s in sets]:
        problems.append(f"--stats reports sets {[(n, g) for n, g, _ in got]}, "
                        f"the file has {[tuple(s) for s in sets]}")
    for name, total, by_kind in got:
        if total != by_kind:
            problems.append(f"--stats of set {name}: {total} guards but the kinds add up "
                            f"to {by_kind}")
    return problems
