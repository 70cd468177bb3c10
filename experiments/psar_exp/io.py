"""Files: CSV in and out, atomic writes (a report is whole or absent), and
Markdown tables."""

import csv
import io
import os


def read_csv(path):
    """Rows of a CSV with a header, as dicts of strings. A last line cut
    short (no newline, fields missing: a run killed inside an append of
    steps.csv, docs/outputs.md) is dropped."""
    with open(path, newline="") as f:
        text = f.read()
    rows = list(csv.DictReader(io.StringIO(text)))
    if rows and not text.endswith("\n") and None in rows[-1].values():
        rows.pop()
    return rows


def write_text(path, text):
    """Writes beside the target and renames over it."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def csv_text(rows, fieldnames=None):
    """Rows (dicts) as CSV text, with the header of the first row unless given."""
    out = io.StringIO(newline="")
    w = csv.DictWriter(out, fieldnames=fieldnames or list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    return out.getvalue()


def write_csv(path, rows, fieldnames=None):
    """Rows (dicts) with the header of the first row unless given."""
    write_text(path, csv_text(rows, fieldnames))


def md_table(header, rows):
    """A Markdown table, one line per row, ending in a newline."""
    lines = ["| " + " | ".join(str(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"
