#!/usr/bin/env python3
"""The fault matrix's table for ARCHITECTURE.md, from tests/fault_cells.rs's own lines.

    cargo test --release --test fault_cells -- --nocapture 2>&1 | tee /tmp/cells.log
    python3 tools/fault-table.py /tmp/cells.log

Each test line reads "MODE | Phase | Fault | SPEC: exit Some(C) after T s"; the table has a
row per (mode, phase) and a column per fault, each cell "exit C, T s" (the whole job's
wall time under mpirun, start-up included).
"""
import re
import sys

LINE = re.compile(r"^(.+?) \| (\w+) \| (\w+) \| (\S+): exit (?:Some\((-?\d+)\)|None) after ([\d.]+) s$")
PHASES = {
    "Init": "init (before MPI_Init)",
    "Start": "start-up agreement",
    "Step": "step",
    "Eval": "evaluation",
    "Checkpoint": "checkpoint write",
    "Finish": "finish",
}
FAULTS = ["Kill", "Stop", "Hang", "Slow", "Term"]
ORDER = ["data parallel", "tensor", "pipeline", "ps worker", "ps server"]


def main(path):
    cells, modes = {}, []
    for line in open(path, encoding="utf-8", errors="replace"):
        m = LINE.match(line.strip())
        if not m:
            continue
        mode, phase, fault, _spec, code, secs = m.groups()
        if mode not in modes:
            modes.append(mode)
        cells[(mode, phase, fault)] = f"exit {code}, {float(secs):.1f} s"
    print("| mode | phase | kill | stop (SIGSTOP) | hang | slow (2 s) | term (SIGTERM) |")
    print("|---|---|---|---|---|---|---|")
    modes.sort(key=lambda m: ORDER.index(m) if m in ORDER else len(ORDER))
    for mode in modes:
        for phase, label in PHASES.items():
            row = [cells.get((mode, phase, f)) for f in FAULTS]
            if not any(row):
                continue
            print(f"| {mode} | {label} | " + " | ".join(c or "—" for c in row) + " |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/dev/stdin")
