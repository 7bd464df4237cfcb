"""The IO starvation detector's constants, one table: each with its unit, and why it has its value.

How they were chosen, said once: the scales of the host's signals, the saw-tooth's "low" and the paths'
weights were set by hand with the detector (commits 6501510 and 681f6da) and have not been searched; the fall
from usual work (``USUAL_TAU_S``, ``DROP_MIN``) came with feature set 4 (commit dd7a134), the light job's fall
(``DROP_SHARE``, ``DROP_MIN_LIGHT``) and the node's shared input path (``SHARED_DROP_SHARE``) were chosen on
development fleets only (simulated seeds 711-713, held-out family seeds 11-15; CHANGELOG.md, 0.1.0). The trees'
threshold and persistence, which are tuned, live in the model file, not here.
"""
from __future__ import annotations

# -- identity ---------------------------------------------------------------------------------------------------
KIND = "io_starvation"       # the alert kind, and the registry's key
STAGE = "node"               # runs on the node stage: each node's messages, in ts order
EPOCH = "node"               # decide() takes one node's epoch: every job judged on the node at once
LEVEL = "job"                # its alerts name a job on a node
RUNBOOK = "runbooks/io_starvation.md"    # its page in the manual (docs/): what to check and do

# -- a job's usual work and its fall ------------------------------------------------------------------------------
USUAL_TAU_S = 3600.0         # s, time constant of a GPU's usual utilization (a moving average): an hour, longer than
                             # a starvation's start, shorter than a service's tide (feature set 4)
DROP_MIN = 0.10              # share (10 points of utilization) below the usual from which a job is judged
DROP_SHARE = 1.0 / 3.0       # or, for a job whose usual work is light (a service at low load), a fall by a third
DROP_MIN_LIGHT = 0.05        # of it and 5 points at least (a service at 15% starved to 7%; development fleets)
PROCS_MIN = 0.5              # share of samples whose GPU holds a process under which a job is not judged
SHARED_DROP_SHARE = 0.5      # beside a starved job of the node, a job that fell less than half as far is not paged
                             # (it slows with the saturated host; development fleets)

# -- the host's input paths, as features ----------------------------------------------------------------------------
PERCENT = 100.0              # a percentage as a share
NET_SCALE = 1.0e9            # bytes/s of host network receive that count as "a lot" (1 GB/s: a feature of 1)
DISK_SCALE = 1.0e9           # bytes/s of disk reads, likewise
IOWAIT_FULL = 0.2            # share of CPU time in iowait that counts as fully waiting (20%; set by hand)
CPU_BOUND_FROM = 0.75        # share of the host's CPUs busy from which its input pipeline may be the bottleneck ...
CPU_BOUND_SPAN = 0.2         # ... fully so 20 points higher (95%; set by hand)
LOW_UTIL = 30.0              # %, a GPU sample below it is "low" (the saw-tooth's trough; set by hand)

# -- naming the path ------------------------------------------------------------------------------------------------
CAUSE_CPU_FROM = 0.5         # share of the host's CPUs busy from which its input pipeline counts as a path ...
CAUSE_CPU_SPAN = 0.45        # ... in full 45 points higher (95%): the window's mean, which a starvation's first
                             # window halves (chosen on development fleets 711 and 712)
IOWAIT_LOW = 0.05            # share of CPU time in iowait under which the disk is not waited on (its reads are kept up)
READS_WEIGHT = 0.5           # disk reads without iowait count half: reads the disk keeps up with are no wait
DISK_QUIET_GBPS = 0.3        # GB/s of disk reads under which network receive is read as the path in full ...
NET_WITH_DISK_WEIGHT = 0.5   # ... and with disk reads above it, at half weight (a network file system caching to disk)
ALSO_SEEN_MIN = 0.3          # a path's evidence (idle while it is busy) from which it is listed as also seen

# -- the threshold baseline -------------------------------------------------------------------------------------------
BASELINE_IOWAIT = 0.10       # the rule an operator writes first: iowait above 10% ...
BASELINE_UTIL = 0.5          # ... while utilization is under half

SECONDS_PER_MINUTE = 60.0    # unit conversion
GB_PER_GIB = 1e9 / 2 ** 30       # what a summary shows in GiB, from the decimal GB the features keep
