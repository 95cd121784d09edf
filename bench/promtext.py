# SPDX-License-Identifier: Apache-2.0
"""bench/promtext.py - the daemon's metrics text (`mlpctl metrics`, the
Prometheus text format) as the bench scripts compare two snapshots of it."""


def load(path):
    """(time, values): each metric summed over its labels, by name; time is
    a first line holding a bare number (a snapshot's time stamp), or None."""
    t, v = None, {}
    for line in open(path):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if " " not in line:
            t = float(line)
            continue
        k, x = line.rsplit(" ", 1)
        k = k.split("{")[0]
        try:
            v[k] = v.get(k, 0.0) + float(x)
        except ValueError:
            pass
    return t, v
