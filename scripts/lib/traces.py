"""The mahimahi traces of ../shared/traces, for the scripts that sweep them (delay-sweep.py,
lab-three.py): their names, their mean capacity, and the scenario keys that make one the
trace of a link."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRACES = os.path.join(ROOT, "..", "shared", "traces")
NAMES = [
    "TMobile-LTE-short",
    "Verizon-LTE-short",
    "TMobile-UMTS-driving",
    "ATT-LTE-driving-2016",
    "Verizon-EVDO-driving",
]


def capacity(path, secs=30):
    """Mean capacity (Mb/s) of a mahimahi trace over its first `secs` seconds."""
    with open(path) as f:
        n = sum(1 for line in f if line.strip() and int(line) <= secs * 1000)
    return n * 1500 * 8 / secs / 1e6


def trace_sets(link, name):
    """`--set`s that make trace `name` (both directions) the trace of link `link`."""
    return [
        f'links.{link}.trace_up="../../shared/traces/{name}.up"',
        f'links.{link}.trace_down="../../shared/traces/{name}.down"',
    ]
