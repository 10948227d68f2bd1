#!/usr/bin/env python3
"""The differential test: the simulator against the real bluetoothd 5.66.

    compare.py --simulator [--bin BLECOMPANION] [--write-docs]
        Runs probe.py against `blecompanion simulate demo-home.json` and
        compares each step with the kept real-daemon reference
        (fixtures/real-bluez/probe-bluez-5.66.jsonl). Every step that differs
        must be listed, with why it remains, in
        fixtures/real-bluez/known-differences.json, and every listed step must
        still differ; docs/SCENARIOS.md's "Differences from bluetoothd 5.66"
        table must be what this prints (--write-docs rewrites it). Exit 1
        otherwise, naming the steps.
    compare.py --reference-check FILE
        A fresh real-daemon run (in the VM) against the kept reference.
    compare.py --update FILE
        Keeps FILE as the new reference (OUT/probe-real.jsonl of a run of
        REAL_BLUEZ_KEEP_LOGS=1 scripts/test-real-bluez, which otherwise
        removes OUT when every workflow passed).
"""

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
REFERENCE = os.path.join(REPO, "fixtures", "real-bluez", "probe-bluez-5.66.jsonl")
KNOWN = os.path.join(REPO, "fixtures", "real-bluez", "known-differences.json")
DOCS = os.path.join(REPO, "docs", "SCENARIOS.md")
BEGIN, END = "<!-- differential:begin -->", "<!-- differential:end -->"


def load(path):
    with open(path) as f:
        return {r["step"]: r["observed"] for r in (json.loads(line) for line in f if line.strip())}


def differing(reference, other):
    return sorted(step for step in set(reference) | set(other) if reference.get(step) != other.get(step))


def table(reference, simulated, known, steps):
    lines = [BEGIN, "",
             "| step | bluetoothd 5.66 | simulator | why it remains |", "|---|---|---|---|"]
    for step in steps:
        real = "<br>".join(reference.get(step, ["(not run)"])) or "(nothing)"
        sim = "<br>".join(simulated.get(step, ["(not run)"])) or "(nothing)"
        lines.append(f"| `{step}` | {cell(real)} | {cell(sim)} | {cell(known.get(step, 'NOT LISTED'))} |")
    if not steps:
        lines.append("| — | | | no step differs |")
    lines += ["", END]
    return "\n".join(lines)


def cell(text):
    return text.replace("|", "\\|").replace("\n", " ")


@contextlib.contextmanager
def simulated_bus(binary, scenario):
    """`blecompanion simulate SCENARIO` on its own private bus, for the
    duration of the with-block; yields the bus address it printed."""
    sim = subprocess.Popen([binary, "simulate", scenario, "--quiet"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = sim.stdout.readline()
        match = re.search(r"DBUS_SYSTEM_BUS_ADDRESS=(\S+)", line)
        if not match:
            sim.terminate()
            raise RuntimeError(f"simulate printed no bus address: {line!r} {sim.stderr.read()[-500:]}")
        yield match.group(1)
    finally:
        sim.terminate()
        sim.wait(10)


def run_simulator_probe(binary, out):
    with simulated_bus(binary, os.path.join(REPO, "fixtures", "scenarios", "demo-home.json")) as bus:
        r = subprocess.run(["/usr/bin/python3", os.path.join(REPO, "scripts", "real-bluez", "probe.py"),
                            "--bus", bus, "--out", out], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise SystemExit(f"compare: the probe failed on the simulator: {r.stderr[-800:]}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--simulator", action="store_true")
    parser.add_argument("--bin", default=os.path.join(REPO, ".build", "debug", "blecompanion"))
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--reference-check")
    parser.add_argument("--update")
    args = parser.parse_args()

    if args.update:
        os.makedirs(os.path.dirname(REFERENCE), exist_ok=True)
        shutil.copyfile(args.update, REFERENCE)
        print(f"compare: {REFERENCE} replaced")
        return 0
    if not os.path.exists(REFERENCE):
        print(f"compare: no reference {REFERENCE}: run REAL_BLUEZ_KEEP_LOGS=1 scripts/test-real-bluez, then compare.py --update OUT/probe-real.jsonl")
        return 1
    reference = load(REFERENCE)
    if args.reference_check:
        # The same daemon run again under emulation: the events of a step
        # must be the same, but two replies racing each other (StartNotify
        # twice) may swap, so the order is not held against it here. The
        # simulator is held to the kept order.
        fresh = load(args.reference_check)
        steps = [s for s in differing(reference, fresh)
                 if sorted(reference.get(s) or []) != sorted(fresh.get(s) or []) or (s in reference) != (s in fresh)]
        for step in steps:
            print(f"{step}: kept {reference.get(step)}\n{' ' * len(step)}  now  {fresh.get(step)}")
        return 1 if steps else 0
    if not args.simulator:
        parser.error("say --simulator, --reference-check FILE or --update FILE")

    out = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"probe-simulator-{os.getpid()}.jsonl")
    run_simulator_probe(args.bin, out)
    simulated = load(out)
    os.unlink(out)
    with open(KNOWN) as f:
        known = json.load(f)
    steps = differing(reference, simulated)
    problems = [f"{s}: differs and is not in known-differences.json\n  real: {reference.get(s)}\n  sim:  {simulated.get(s)}"
                for s in steps if s not in known]
    problems += [f"{s}: listed in known-differences.json but no longer differs (remove it)" for s in known if s not in steps]
    generated = table(reference, simulated, known, steps)
    with open(DOCS) as f:
        docs = f.read()
    if BEGIN not in docs or END not in docs:
        problems.append(f"docs/SCENARIOS.md has no {BEGIN} … {END} block")
    else:
        current = docs[docs.index(BEGIN):docs.index(END) + len(END)]
        if current != generated:
            if args.write_docs:
                with open(DOCS, "w") as f:
                    f.write(docs.replace(current, generated))
                print("compare: docs/SCENARIOS.md rewritten")
            else:
                problems.append("docs/SCENARIOS.md's difference table is not this run's (compare.py --simulator --write-docs)")
    print(f"compare: {len(reference)} steps, {len(steps)} differ from bluetoothd 5.66, all listed with why"
          if not problems else "compare: " + "\n".join(problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
