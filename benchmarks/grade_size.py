"""How the time to read a submission grows with its size: linear, or the budget cannot hold.

    python benchmarks/grade_size.py [--sizes 10,30,100,300,1000]

Each size is the lecture notebook with exercise 1 answered and padded with cells of plain
assignments to about that many KB; the time is `read_submission`'s (finding every step's code
and each exercise's program), the part of grading that grows with the file: the checks after
it are one per step, whatever the size. Printed per size, with the time per KB, and the ratio
of the largest size's time per KB to the smallest's (1 is linear; 10x the size at 2x the time
per KB is n^1.3).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))  # the tutor of this checkout, whatever is installed

import lecture_notebooks as L  # noqa: E402

from tutor.course.submission import read_submission  # noqa: E402
from tutor.pack.model import load_pack  # noqa: E402


def padded(kb: int) -> dict:
    doc = L.notebook([L.ex1_one_cell()])
    filler = "".join(f"spare_{j} = {j} * 2 + 1\n" for j in range(20))
    base = len(json.dumps(doc))
    count = max(0, (kb * 1024 - base) // (len(filler) + 120))
    cells = [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
              "source": filler.replace("spare_", f"spare{i}_")} for i in range(count)]
    doc["cells"] = doc["cells"][:3] + cells + doc["cells"][3:]
    return doc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,30,100,300,1000")
    args = parser.parse_args()
    pack = load_pack()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for kb in (int(x) for x in args.sizes.split(",")):
            path = L.write(Path(folder) / f"padded_{kb}.ipynb", padded(kb))
            size = path.stat().st_size / 1024
            start = time.perf_counter()
            read_submission(path, pack)
            took = time.perf_counter() - start
            rows.append((size, took))
            print(f"{size:7.0f} KB  {took:6.2f} s  {1000 * took / size:6.2f} ms per KB",
                  flush=True)
    (s0, t0), (s1, t1) = rows[0], rows[-1]
    slope = math.log(t1 / t0) / math.log(s1 / s0)
    print(f"time per KB, largest over smallest: {(t1 / s1) / (t0 / s0):.2f}x; "
          f"time grows as size^{slope:.2f}")


if __name__ == "__main__":
    main()
