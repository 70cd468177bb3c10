"""Generated text and its check: blocks of a hand-written README that the
harness fills from the data, and the difference between what a results
folder holds and what its data regenerates, named by file, line and, in a
Markdown or CSV table, by row and column.

A README may keep prose around generated blocks:

    <!-- generated:begin bubble -->
    ... written by the report, never by hand ...
    <!-- generated:end -->

fill_blocks() replaces the body of each named block; a block the report
names but the README lacks is an error (a report cannot say where it goes).
"""

import csv
import io
import os
import re

BEGIN = "<!-- generated:begin {} -->"
END = "<!-- generated:end -->"
_BLOCK = re.compile(r"<!-- generated:begin (\S+) -->\n(.*?)<!-- generated:end -->", re.S)


class GeneratedError(ValueError):
    """A README and its generated blocks do not fit together."""


def blocks(text):
    """{name: body} of every generated block in `text`."""
    return {m.group(1): m.group(2) for m in _BLOCK.finditer(text)}


def fill_blocks(text, bodies, where="README.md"):
    """`text` with the body of each block in `bodies` ({name: text})
    replaced; every name must have its block, and a body ends in a newline."""
    missing = sorted(set(bodies) - set(blocks(text)))
    if missing:
        raise GeneratedError(f"{where}: no generated block named {', '.join(missing)} "
                             f"(add {BEGIN.format(missing[0])} ... {END})")

    def body(m):
        name = m.group(1)
        if name not in bodies:
            return m.group(0)
        new = bodies[name] if bodies[name].endswith("\n") else bodies[name] + "\n"
        return f"{BEGIN.format(name)}\n{new}{END}"
    return _BLOCK.sub(body, text)


def update_readme(folder, bodies):
    """Fills the named blocks of folder/README.md; a README that is missing
    (a run outside results/) is started with one block per name."""
    path = os.path.join(folder, "README.md")
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
    else:
        text = f"# {os.path.basename(os.path.normpath(folder))}\n\n" + "".join(
            f"{BEGIN.format(name)}\n{END}\n\n" for name in bodies)
    text = fill_blocks(text, bodies, path)
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
    return path


# ---- differences ---------------------------------------------------------------

def _cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _table_header(lines, i):
    """The header cells of the Markdown table line i belongs to, or None."""
    if not lines[i].lstrip().startswith("|"):
        return None
    j = i
    while j > 0 and lines[j - 1].lstrip().startswith("|"):
        j -= 1
    return _cells(lines[j])


def _describe_md(name, committed, regenerated, i):
    """One line naming the first difference at line i (0-based)."""
    old = committed[i] if i < len(committed) else None
    new = regenerated[i] if i < len(regenerated) else None
    if old is None:
        return f"{name}:{i + 1}: the data gives a line the file lacks: {new!r}"
    if new is None:
        return f"{name}:{i + 1}: the file has a line the data does not give: {old!r}"
    header = _table_header(committed, i)
    if header and new.lstrip().startswith("|"):
        a, b = _cells(old), _cells(new)
        if len(a) == len(b):
            for k, (x, y) in enumerate(zip(a, b)):
                if x != y:
                    col = header[k] if k < len(header) else f"#{k + 1}"
                    return (f"{name}:{i + 1}: table row '{a[0]}', column '{col}': "
                            f"committed {x!r}, the data gives {y!r}")
    return f"{name}:{i + 1}: committed {old!r}, the data gives {new!r}"


def _describe_csv(name, committed, regenerated):
    a = list(csv.reader(io.StringIO(committed)))
    b = list(csv.reader(io.StringIO(regenerated)))
    if a[:1] != b[:1]:
        return f"{name}:1: header: committed {a[:1]}, the data gives {b[:1]}"
    header = a[0] if a else []
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else None
        y = b[i] if i < len(b) else None
        if x == y:
            continue
        if x is None or y is None:
            return (f"{name}:{i + 1}: " + ("the data gives a row the file lacks: " if x is None
                                             else "the file has a row the data does not give: ")
                    + ",".join(y if x is None else x))
        for k in range(max(len(x), len(y))):
            u = x[k] if k < len(x) else ""
            v = y[k] if k < len(y) else ""
            if u != v:
                col = header[k] if k < len(header) else f"#{k + 1}"
                return (f"{name}:{i + 1}: row {i} ('{x[0] if x else ''}'), column '{col}': "
                        f"committed {u!r}, the data gives {v!r}")
    return None


def difference(name, committed, regenerated):
    """None when the texts are equal, else one line naming the file and the
    first differing line (and, in a table, its row and column)."""
    if committed == regenerated:
        return None
    if name.endswith(".csv"):
        found = _describe_csv(name, committed, regenerated)
        if found:
            return found
    a, b = committed.split("\n"), regenerated.split("\n")
    for i in range(max(len(a), len(b))):
        if (a[i] if i < len(a) else None) != (b[i] if i < len(b) else None):
            return _describe_md(name, a, b, i)
    return f"{name}: differs"
