#!/usr/bin/env python3
"""Compare two hvtrain training runs of the same job (say CUDA against the CPU reference).

Usage:
  compare_runs.py --ref-log cpu.log --ref-dir runs/cpu --log cuda.log --dir runs/cuda \
                  [--expect-device cuda] [--acc-tol 0.5] [--steps 20] \
                  [--first-atol 5e-4] [--loss-atol 2e-3] [--loss-rtol 1e-3] [--markdown FILE]

What it checks (exit 1 on a mismatch, 2 when something to compare is missing):
  * test accuracy of the last epoch (metrics.jsonl in each output dir) within --acc-tol
    percentage points;
  * the training loss of the first --steps steps. hvtrain logs no per-step loss: with
    `training.log_every = 1` rank 0 prints, every step k, "loss X (rank 0's mean so far)",
    the mean of rank 0's per-sample losses over steps 1..k, with 4 decimals. Those running
    means are compared: step 1 (the forward pass of identical initial weights on the same
    batch) within --first-atol, steps 1..N within --loss-atol + --loss-rtol * |reference|.
    The per-step losses recovered from the means (k*m_k - (k-1)*m_(k-1)) are printed for
    information only: the 4-decimal rounding makes them uncertain by about k * 1e-4.
  * with --expect-device, that the run's log says the backend is that device (so a run that
    silently fell back to the CPU cannot pass).
Standard library only.
"""
import argparse
import json
import os
import re
import sys

STEP_RE = re.compile(r"\] epoch 1/\d+: step (\d+)/\d+ \([^)]*\), loss ([0-9.eE+-]+|nan|inf) \(rank 0's mean so far\)")
BACKEND_RE = re.compile(r"backend: (.*)$", re.M)
DEVICE_RE = re.compile(r"rank \d+/\d+ on host .*device: (\S+)")


def running_means(log_text):
    """{step: rank 0's running mean loss} of epoch 1, from the progress lines."""
    out = {}
    for m in STEP_RE.finditer(log_text):
        out.setdefault(int(m.group(1)), float(m.group(2)))
    return out


def last_epoch(out_dir):
    path = os.path.join(out_dir, "metrics.jsonl")
    lines = [l for l in open(path).read().splitlines() if l.strip()]
    if not lines:
        raise ValueError(f"{path} is empty")
    return json.loads(lines[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref-log", required=True, help="log (stderr) of the reference run (CPU)")
    ap.add_argument("--ref-dir", required=True, help="output.dir of the reference run")
    ap.add_argument("--log", required=True, help="log of the run under test (CUDA)")
    ap.add_argument("--dir", required=True, help="output.dir of the run under test")
    ap.add_argument("--expect-device", default=None, help="e.g. cuda: the run under test must say so in its log")
    ap.add_argument("--acc-tol", type=float, default=0.5, help="test accuracy, percentage points (0.5)")
    ap.add_argument("--steps", type=int, default=20, help="first steps whose losses are compared (20)")
    ap.add_argument("--first-atol", type=float, default=5e-4, help="step 1 loss, absolute (5e-4)")
    ap.add_argument("--loss-atol", type=float, default=2e-3, help="running mean loss, absolute part (2e-3)")
    ap.add_argument("--loss-rtol", type=float, default=1e-3, help="running mean loss, relative part (1e-3)")
    ap.add_argument("--markdown", default=None, help="also write the comparison as markdown here")
    a = ap.parse_args()

    report, failures, missing = [], [], []

    def say(line=""):
        report.append(line)
        print(line)

    try:
        ref_text, text = open(a.ref_log, errors="replace").read(), open(a.log, errors="replace").read()
    except OSError as e:
        print(f"compare_runs: cannot read a log: {e}", file=sys.stderr)
        return 2

    # Which device each run used, as the log says.
    for name, t in (("reference", ref_text), ("under test", text)):
        dev = sorted(set(DEVICE_RE.findall(t)))
        be = BACKEND_RE.findall(t)
        say(f"- {name}: device {', '.join(dev) or '?'}; backend line: {be[0].strip() if be else '(none)'}")
    if a.expect_device:
        be = BACKEND_RE.findall(text)
        devs = DEVICE_RE.findall(text)
        if be:
            ok = a.expect_device in be[0]
        else:
            ok = bool(devs) and all(d.startswith(a.expect_device) for d in devs)
        if not ok:
            failures.append(f"the run under test did not report device {a.expect_device!r}")

    # Test accuracy.
    try:
        r, t = last_epoch(a.ref_dir), last_epoch(a.dir)
        ra, ta = r.get("test_accuracy"), t.get("test_accuracy")
        if ra is None or ta is None:
            missing.append("test_accuracy missing from metrics.jsonl (no data.test?)")
        else:
            d = 100 * abs(ra - ta)
            ok = d <= a.acc_tol
            say(f"- test accuracy after epoch {t.get('epoch')}: reference {100*ra:.2f} %, under test {100*ta:.2f} %, "
                f"|diff| {d:.2f} points (tolerance {a.acc_tol}): {'ok' if ok else 'MISMATCH'}")
            if not ok:
                failures.append(f"test accuracy differs by {d:.2f} points")
            say(f"- final train_loss: reference {r.get('train_loss'):.4f}, under test {t.get('train_loss'):.4f}; "
                f"samples/s: reference {r.get('samples_per_sec', 0):.0f}, under test {t.get('samples_per_sec', 0):.0f}")
    except (OSError, ValueError, KeyError, TypeError) as e:
        missing.append(f"metrics.jsonl: {e}")

    # Losses of the first steps.
    rm, tm = running_means(ref_text), running_means(text)
    n = a.steps
    have = [k for k in range(1, n + 1) if k in rm and k in tm]
    if len(have) < n:
        missing.append(f"per-step loss lines for steps 1..{n}: reference has {sum(k in rm for k in range(1, n+1))}, "
                       f"under test {sum(k in tm for k in range(1, n+1))} (was training.log_every = 1 set?)")
    if have:
        say("")
        say("| step | reference mean | under test mean | abs diff | tolerance | recovered step loss ref / test |")
        say("|---:|---:|---:|---:|---:|---|")
        worst = 0.0
        for k in have:
            d = abs(rm[k] - tm[k])
            tol = a.first_atol if k == 1 else a.loss_atol + a.loss_rtol * abs(rm[k])
            ok = d <= tol and d == d  # nan fails
            worst = max(worst, d)
            rec = ""
            if k - 1 in rm and k - 1 in tm or k == 1:
                pr = rm.get(k - 1, 0.0) * (k - 1)
                pt = tm.get(k - 1, 0.0) * (k - 1)
                rec = f"{k*rm[k]-pr:.4f} / {k*tm[k]-pt:.4f}"
            say(f"| {k} | {rm[k]:.4f} | {tm[k]:.4f} | {d:.4f} | {tol:.4f} | {rec} |{'' if ok else ' MISMATCH'}")
            if not ok:
                failures.append(f"step {k}: running mean loss {tm[k]:.4f} vs reference {rm[k]:.4f} (|diff| {d:.4f} > {tol:.4f})")
        say("")
        say(f"- largest |diff| of the running mean loss over steps 1..{have[-1]}: {worst:.4f}")

    for m in missing:
        say(f"- MISSING: {m}")
    for f in failures:
        say(f"- FAIL: {f}")
    verdict = "FAIL" if failures else ("INCOMPLETE" if missing else "PASS")
    say(f"- verdict: {verdict}")
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write("\n".join(report) + "\n")
    return 1 if failures else (2 if missing else 0)


if __name__ == "__main__":
    sys.exit(main())
