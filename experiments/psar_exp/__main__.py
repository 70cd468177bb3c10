"""python3 -m psar_exp (from experiments/): the harness's commands.

    check [--results DIR] [FOLDER ...]   every results folder against what its
                                         committed data regenerates; exit 1
                                         naming each difference; --write
                                         writes the regenerated texts instead
"""

import argparse
import sys

from psar_exp import check


def main(argv=None):
    ap = argparse.ArgumentParser(prog="psar_exp", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="regenerate every results folder from its data and diff")
    c.add_argument("--results", help="the results root (default: the repository's results/)")
    c.add_argument("--write", action="store_true",
                   help="write the regenerated texts instead of comparing (no experiment runs)")
    c.add_argument("folders", nargs="*", help="folder names under the results root (default: all)")
    args = ap.parse_args(argv)
    names, problems = check.check(args.results, args.folders or None, args.write)
    for name, reason in check.unchecked_folders(names):
        print(f"not regenerated: {name}: {reason}")
    for p in problems:
        print(p)
    print(f"psar_exp check: {len(names)} folder(s), "
          f"{'no difference' if not problems else f'{len(problems)} difference(s)'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
