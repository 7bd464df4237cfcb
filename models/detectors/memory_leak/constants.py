"""The memory leak detector's constants, one table: each with its unit, and why it has its value.

How they were chosen, said once: the windows (10, 30 and 60 minutes), the blocks, the warm-up and the thresholds
of the features were set by hand with the detector (commits 6501510 and 681f6da) and have not been searched;
``RUNAWAY_MIN`` and ``RUNAWAY_STEP`` were chosen on development fleets only (simulated seeds 711-716 at 2-60 s,
held-out family seeds 11-15; CHANGELOG.md, 0.1.0: runaways), ``SHARED_PEERS`` and ``SHARED_RATE_SHARE`` on the
held-out family's seeds 11-15 (CHANGELOG.md, 0.1.0: a rise shared). The trees' threshold,
persistence and urgent score, which are tuned, live in the model file, not here.
"""
from __future__ import annotations

# -- identity ---------------------------------------------------------------------------------------------------
KIND = "memory_leak"         # the alert kind, and the registry's key
STAGE = "node"               # runs on the node stage: each node's messages, in ts order
LEVEL = "gpu"                # its alerts name a GPU (its process)
RUNBOOK = "runbooks/memory_leak.md"    # its page in the manual (docs/): what to check and do

# -- the history and its windows -----------------------------------------------------------------------------------
HISTORY_MINUTES = 61         # minutes of peaks kept: an hour, and the minute it starts from
SHORT_MIN = 10               # minutes of the short window (a leak that began minutes ago shows here first)
MID_MIN = 30                 # minutes of the middle window (the rate the time to the OOM is told at)
LONG_MIN = 60                # minutes of the long window
LOAD_MINUTES = MID_MIN + 1   # the loads the features read: the last 30 minutes' (as the middle window's peaks)
LOAD_ENDS_MIN = 10           # minutes at each end of the load window compared for the load's trend
MIN_HISTORY = 10             # minutes of history under which a process is not judged: too short to tell
BLOCK_MIN = 5                # minutes to a block whose median is compared with the next (how steadily it grows)
THIRDS = 3                   # the slope of a long window: from the median of its first third to its last's
MIN_POINTS = 3               # values under which R², a correlation or a trend says nothing (0)

# -- what counts as growth -------------------------------------------------------------------------------------------
BREATH_SHARE = 0.0004        # share of the GPU's memory a block must grow by to count (an allocator breathes by less)
JUMP_GROWTH_SHARE = 0.002    # share of the GPU's memory the middle window must grow by for its largest jump's share
                             # of the growth to mean anything (1.0 otherwise: one step, nothing to compare)
TINY_SLOPE = 1e-6            # share of the GPU's memory an hour under which memory is not growing (no OOM ahead)
NEVER_MIN = 1e6              # minutes to the OOM told when memory is not growing (the feature's ceiling)
FLAT_VARIANCE = 1e-12        # a variance under which a series is flat (no correlation)

# -- the process -----------------------------------------------------------------------------------------------------
WARMUP_MIN = 10.0            # minutes: a process's first minutes are its warm-up (a model loading), never judged
AT_LIMIT_SHARE = 0.03       # share of the GPU's memory left under which a process is at the limit: a leak that ends
                             # there ran out of memory, and one that stops growing there has not cleared (set by hand:
                             # a framework keeps a little back; a job that ends normally rarely sits this close)
OOM_GROWTH_S = 120.0         # s of a leak's growth: a process gone with less headroom than that at its last sample
                             # ran out of memory too (a fast leak, sampled every minute, dies between two samples)
RELEASED_SHARE = 0.2         # share of the GPU's memory a process at the limit lets go at once: the out-of-memory
                             # caught (a framework that frees its cache on the error and goes on)
RESTART_QUIET_S = 300.0      # s after a restart the GPU is left out of the other detectors (a job reloading its
                             # checkpoint looks idle or slow meanwhile)

# -- urgency, runaways, rises shared ---------------------------------------------------------------------------------
CRITICAL_MIN = 30.0          # minutes to the OOM under which the alert is critical, and a window may be urgent
RUNAWAY_MIN = 5              # minutes in a row of growth for a runaway
RUNAWAY_STEP = 0.01          # the least growth of each of those minutes, a share of the GPU's memory (60% an hour):
                             # at 0.5% a minute KV caches climbing with load paged falsely (development fleets)
SHARED_PEERS = 2             # GPUs of other jobs on the node that grew with it, for a rise to be shared
SHARED_RATE_SHARE = 0.5      # ... each at least this share of its rate (30-minute slope)

# -- the threshold baseline ------------------------------------------------------------------------------------------
BASELINE_HEADROOM = 0.10     # the rule an operator writes first: less than 10% of the memory left

# -- what a page says ------------------------------------------------------------------------------------------------
HOURS_FROM_MIN = 90          # minutes to the OOM from which the time is told in hours
UNDER_A_MINUTE = 0.5         # minutes to the OOM under which it is told as "under a minute"

# -- units and storage -----------------------------------------------------------------------------------------------
MINUTES_PER_HOUR = 60.0      # unit conversion
SECONDS_PER_MINUTE = 60      # unit conversion
SECONDS_PER_HOUR = 3600.0    # unit conversion
PERCENT = 100.0              # a percentage as a share
BYTES_PER_GB = 1e9           # the features keep decimal GB; rates are told in bytes
WHOLE = 2.0 ** 53            # a double holds every whole number below this exactly
STEP = 2 ** 31               # a step of a 32-bit integer
INT16_LIMIT = 2 ** 15        # history lengths below it index their pairs in 16 bits
GB_PER_GIB = 1e9 / 2 ** 30       # what a summary shows in GiB, from the decimal GB the features keep
