"""The straggler detector's constants, one table: each with its unit, and why it has its value.

How they were chosen, said once: the lockstep rule's constants (``LOCKSTEP_EPOCHS``, ``BIG_MOVE``, the shares
``MOVED_WITH_SHARE`` and ``INDEPENDENT_SHARE``) were set from the reasoning of the rule when it was written
(commit e392b35), not searched; the one change after (a shared move may fall in the neighbouring epoch) came
from the training fleets (seeds 101-104). ``MIN_SLOWDOWN`` was added on development fleet 555 (CHANGELOG.md, 0.1.0).
The others were set by hand with the detector (commit 6501510) and have not been tuned since; the trees'
threshold and persistence, which are tuned, live in the model file, not here.
"""
from __future__ import annotations

# -- identity ---------------------------------------------------------------------------------------------------
KIND = "straggler"           # the alert kind, and the registry's key
STAGE = "job"                # runs on the job stage: every GPU of the job, from every node, in (ts, node) order
EPOCH = "job"                # decide() takes one job's epoch: every GPU and node of the job at once
LEVEL = "gpu"                # its alerts name a GPU (a whole slow node is named by its node)
RUNBOOK = "runbooks/straggler.md"    # its page in the manual (docs/): what to check and do

# -- when a job is judged ---------------------------------------------------------------------------------------
WORKING_UTIL = 40.0          # %, the job's median utilization under which it is not judged: a checkpoint, an
                             # evaluation pause or a service at low load keeps nobody waiting (set by hand)
BUSY_UTIL = 50.0             # %, samples at or above it are busy; clocks and power compare only between those (an
                             # idle GPU parks its clock, which is not evidence; set by hand)
LOCKSTEP_EPOCHS = 20         # epochs of per-GPU mean utilization kept to tell lockstep: 10 minutes at 30 s, long
                             # enough to see a checkpoint or an evaluation pause (reasoned, not searched)
BIG_MOVE = 15.0              # points of utilization from one epoch to the next that count as a move: well above the
                             # epoch-to-epoch noise of a steady job (a few points), below a pause (reasoned)
HALF_MOVE = 0.5              # share of BIG_MOVE by which the others moving along count as moving the same way
MOVED_WITH_SHARE = 1 / 3     # a GPU moved alone when fewer than this share of the job's other GPUs moved with it
INDEPENDENT_SHARE = 0.5      # the job is independent work when at least this share of its GPUs moved alone ...
INDEPENDENT_MIN = 2          # ... and at least this many (one GPU moving alone is what a straggler looks like)
PAUSED_SHARE = 2 / 3         # GPUs paused together when at least this share of them fell half a big move ...
PAUSED_MIN = 2               # ... and at least this many, one of them by a whole big move

# -- what counts as behind --------------------------------------------------------------------------------------
MIN_SLOWDOWN = 0.03          # share behind its peers (clock or utilization) under which nobody waits for it: a node
                             # throttled like the rest of its job read "0% behind" and opened an incident (dev 555)
DEFICIT_MIN, DEFICIT_MAX = -0.5, 1.0      # a deficit (share of the peers' value) is clipped to this range: ahead
                                          # by half or more tells nothing more; behind cannot exceed all
TEMP_EXCESS_MIN, TEMP_EXCESS_MAX = -20.0, 40.0   # °C above the peers, clipped: beyond, the reading is a fault
PERCENT = 100.0              # a percentage as a share (utilization features are shares)

# -- what a page says -------------------------------------------------------------------------------------------
CAUSE_THROTTLED_SHARE = 0.2  # share of the window throttled (not at the power cap) from which the throttle
                             # reason is named as the cause (set by hand)
LOW_CLOCK = 0.97             # a clock share under this times the peers' is "lower SM clock" (3% as MIN_SLOWDOWN)
BASELINE_THROTTLED_SHARE = 0.5   # the threshold baseline: throttled for half the window

# -- storage ----------------------------------------------------------------------------------------------------
TENTHS_MAX = 3000.0          # a lockstep history's utilization kept in 16-bit tenths below this (any percent is)
