"""Lists the Python files the guest needs to run rdma-core's test suite (tests/) on pyverbs.

Run by images/build.sh with the toolchain root's python3, chrooted in that root, as
`python3 pyverbs-files.py <dir>/tests`. It loads the suite the way rdma-core's
run_tests.py does (every tests/test_*.py module, hence pyverbs and its provider modules),
runs unittest's command-line runner over an empty selection, and prints one path a line:
every file under /usr/lib/python3* that the loaded modules came from, with its compiled
.pyc, and for a module inside a package the whole package directory (packages such as
multiprocessing and unittest import submodules lazily, at run time, and with them the C
modules those import: every submodule of such a package is imported once here; the codecs of
`encodings` file by file). Python's own startup modules (site, encodings, ...) are among
the loaded ones. Importing the suite writes the tests' own .pyc files next to them, which
build.sh copies along.

It does not know about modules a test imports inside a function body from outside the
packages above; the guest test (tests/guest_pyverbs.rs) fails on "No module named".
"""
import importlib
import importlib.util
import os
import pkgutil
import sys
import unittest

# Packages copied module by module, not whole: the codecs (one module each, found by
# name at run time; Python's startup loads the ones it needs).
FILE_BY_FILE = ('encodings',)
PREFIXES = tuple(p for p in sys.path if p.startswith('/usr/lib/python3'))


def main():
    tests_dir = os.path.abspath(sys.argv[1])
    sys.path[:0] = [tests_dir, os.path.dirname(tests_dir)]
    sys.argv = [sys.argv[0], '--dev', 'none']
    from args_parser import parser
    parser.parse_args()
    import tests
    unittest.main(module=tests, argv=['run_tests', '-v', '-k', 'no-such-test'], exit=False)

    # Twice: the second pass imports every submodule of the packages the first pass copies
    # whole, so what those import lazily (C modules such as _multiprocessing) is listed too.
    files, packages = collect()
    for name in sorted(packages):
        for info in pkgutil.walk_packages(importlib.import_module(name).__path__, name + '.'):
            if info.name.endswith('.__main__'):  # runs a program when imported
                continue
            try:
                importlib.import_module(info.name)
            except (Exception, SystemExit):  # platform-specific ones (Windows, ...)
                pass
    files, _ = collect(whole=packages)
    for f in sorted(files):
        print(f)


def collect(whole=None):
    """The files of the loaded modules (see the module's doc), and the packages copied whole
    (all of them, or only those of `whole`: other packages file by file)."""
    files, packages = set(), set()
    for mod in list(sys.modules.values()):
        path = getattr(mod, '__file__', None)
        if not path or not path.startswith('/usr/lib/python3'):
            continue
        root = next((p for p in sorted(PREFIXES, key=len, reverse=True)
                     if path.startswith(p + '/')), None)
        if root is None:
            continue
        top = path[len(root) + 1:].split('/')[0]
        if top.endswith(('.py', '.so')) or top in FILE_BY_FILE or (whole is not None and top not in whole):
            files.add(path)
            if path.endswith('.py'):
                pyc = importlib.util.cache_from_source(path)
                if os.path.exists(pyc):
                    files.add(pyc)
        else:
            packages.add(top)
            for dirpath, _, names in os.walk(os.path.join(root, top)):
                if '/test' in dirpath[len(root):]:
                    continue
                files.update(os.path.join(dirpath, n) for n in names)
    return files, packages


if __name__ == '__main__':
    main()
